"""End-to-end helpers: the model module and registries the tests build, and how the console script is run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MODELS = '''
"""Tiny models for the end-to-end tests (a few milliseconds each), and broken ones."""
import os
import signal
import time

import torch
from torch import nn


def _log(log):
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write("built\\n")


def tiny(width: int = 4, log: str = ""):
    _log(log)
    return nn.Sequential(nn.Conv2d(3, width, 3), nn.Sequential(nn.ReLU(), nn.Flatten()))


def tagger(log: str = ""):
    _log(log)
    return nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 3))


def tagger_inputs(length: int = 6):
    return (torch.arange(length).unsqueeze(0),), {}


def raises():
    raise RuntimeError("factory exploded on purpose")


def hangs():
    time.sleep(3600)


def dies():
    os.kill(os.getpid(), signal.SIGKILL)


def scripted():
    model = nn.Sequential()
    model.add_module("<script>alert(1)</script>", nn.Linear(4, 4))
    return model


class Bessel(nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(x)


def incomplete():
    return nn.Sequential(nn.Linear(4, 4), Bessel())


def warns():
    """torch warns that the nested-tensor fast path is off (batch_first is not True)."""
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 1)


class Explodes(nn.Module):
    def forward(self, x):
        raise ValueError("this layer cannot run")


def fails():
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), Explodes()))
'''

BROKEN_REGISTRY = '''
[catalog]
title = "Broken <zoo>"
description = "Every way an entry can fail."

[[models]]
name = "tiny"
factory = "e2e_models:tiny"
input_shape = [3, 8, 8]

[[models.variants]]
name = "w4"

[[models.variants]]
name = "w8"
kwargs = { width = 8 }

[[models]]
name = "raises"
factory = "e2e_models:raises"
input_shape = [4]

[[models]]
name = "hangs"
factory = "e2e_models:hangs"
input_shape = [4]

[[models]]
name = "dies"
factory = "e2e_models:dies"
input_shape = [4]

[[models]]
name = "badimport"
factory = "broken_import:f"
input_shape = [4]

[[models]]
name = "script"
factory = "e2e_models:scripted"
input_shape = [4]
description = "A module named <script>alert(1)</script> through add_module."

[[models]]
name = "incomplete"
factory = "e2e_models:incomplete"
input_shape = [4]
strict = true

[[models]]
name = "tagger"
factory = "e2e_models:tagger"
inputs = "e2e_models:tagger_inputs"
device = "meta"
'''

SITE_REGISTRY = '''
[catalog]
title = "Tiny zoo"

[site]
mkdocs = "docs-site/mkdocs.yml"
section = "Costs"

[[models]]
name = "tiny"
factory = "e2e_models:tiny"
kwargs = { log = "LOG" }
input_shape = [3, 8, 8]
tags = ["vision"]

[[models.variants]]
name = "w4"

[[models.variants]]
name = "w8"
kwargs = { width = 8 }

[[models]]
name = "tagger"
factory = "e2e_models:tagger"
kwargs = { log = "LOG" }
inputs = "e2e_models:tagger_inputs"
inputs_kwargs = { length = 5 }
'''

USER_REGISTRY = '''
[catalog]
title = "Our models"

[[models]]
name = "transformer_base"
factory = "native_transformer:transformer_base"
inputs = "native_transformer:transformer_inputs"
description = "PyTorch's nn.Transformer at its base size."

[[models]]
name = "partial"
factory = "e2e_models:incomplete"
input_shape = [4]
description = "A custom layer without a formula: its numbers are lower bounds."

[[models]]
name = "warns"
factory = "e2e_models:warns"
input_shape = [5, 8]

[[models]]
name = "fails"
factory = "e2e_models:fails"
input_shape = [4]
'''

MKDOCS = '''site_name: Our docs
theme:
  name: material
markdown_extensions:
  - tables
nav:
  - Home: index.md
'''


@dataclass
class Build:
    folder: Path
    registry: Path
    output: Path
    result: subprocess.CompletedProcess


def console_script() -> list[str]:
    """The installed ``torchscan-report`` when there is one, else the same entry point from this checkout."""
    installed = shutil.which("torchscan-report")
    return [installed] if installed else [sys.executable, "-m", "torchscan.report.cli"]


def run_cli(*args: object, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([*console_script(), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def write_registry_folder(folder: Path, module: str, models: str, registry: str | None = None) -> Path:
    """``folder`` with the model module ``module`` (``models`` is its source) and, when given, ``models.toml``
    (``registry``); a module of that name imported before is forgotten, so the next import reads this one."""
    (folder / f"{module}.py").write_text(models, encoding="utf-8")
    if registry is not None:
        (folder / "models.toml").write_text(registry, encoding="utf-8")
    sys.modules.pop(module, None)
    return folder


def write_models(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "e2e_models.py").write_text(MODELS, encoding="utf-8")
    # Found by check's lookups (it defines f), but importing it fails: the run fails in stage import.
    (folder / "broken_import.py").write_text("import no_such_module\n\n\ndef f():\n    pass\n", encoding="utf-8")
    shutil.copy(ROOT / "site_models" / "native_transformer.py", folder / "native_transformer.py")
