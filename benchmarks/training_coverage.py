"""Which training steps does ``measure_flops`` count completely? A coverage survey, not a test and not timed.

Every model of the third-party tests (``tests/integrations/third_party_models.py``), plus torchvision ResNet-18/50,
MobileNetV2, a small ViT, ``nn.LSTM`` and ``nn.Transformer``, runs one training step (batch 2: forward,
cross-entropy on the logits, backward, an optimizer step) on the CPU and on ``meta``, with AdamW, Adam and SGD
with momentum in their default, ``foreach`` and ``fused`` implementations; the second step is counted. One line
per (model, device, optimizer): the status, the known FLOPs and any uncounted operator.

    python benchmarks/training_coverage.py            # every optimizer (a few minutes)
    python benchmarks/training_coverage.py --quick    # AdamW only
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integrations"), str(ROOT / "site_models"), str(ROOT / "tests")]
import third_party_models as t  # noqa: E402 -- found through the paths above
import torch  # noqa: E402
from losses import loss_of  # noqa: E402 -- benchmarks/, the script's own folder
from torch import nn  # noqa: E402

from torchscan import measure_flops  # noqa: E402


def _tv(build):
    def built(variant):
        t.import_torchvision()
        return build()
    return built


def _tvm(name, **kw):
    return _tv(lambda: getattr(t.import_torchvision().models, name)(**kw))


def _vit():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=32, mlp_dim=64,
                             num_classes=10)


class _Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm, self.head = nn.LSTM(16, 32, num_layers=2, batch_first=True), nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.lstm(x)[0][:, -1])


class _Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Transformer(32, 2, 1, 1, 64, batch_first=True)

    def forward(self, x):
        return self.net(x, x[:, :4])


EXTRA = [
    t.Case("torchvision", "ResNet-18", "", _tvm("resnet18", num_classes=10), t._image(32)),
    t.Case("torchvision", "ResNet-50", "", _tvm("resnet50", num_classes=10), t._image(32)),
    t.Case("torchvision", "MobileNetV2", "", _tvm("mobilenet_v2", num_classes=10), t._image(32)),
    t.Case("torchvision", "ViT", "", _tv(_vit), t._image(32)),
    t.Case("torch", "LSTM", "", lambda v: _Lstm(), t.tensor_inputs(5, 16)),
    t.Case("torch", "Transformer", "", lambda v: _Transformer(), t.tensor_inputs(8, 32)),
]


def batch2(args, kwargs):
    twice = lambda v: torch.cat([v, v]) if isinstance(v, torch.Tensor) else v
    return tuple(twice(a) for a in args), {k: twice(v) for k, v in kwargs.items()}


OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, foreach=True),
    "adamw-fused": lambda p: torch.optim.AdamW(p, fused=True),
    "adam-foreach": lambda p: torch.optim.Adam(p, foreach=True, weight_decay=0.01),
    "adam-fused": lambda p: torch.optim.Adam(p, fused=True),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd-foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True, nesterov=True),
    "sgd-fused": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, fused=True, weight_decay=1e-4),
}


def counted_step(model, args, kwargs, optimizer):
    """``measure_flops`` of the second step (the first creates the optimizer's state)."""
    def step():
        optimizer.zero_grad()
        loss_of(model(*args, **kwargs)).backward()
        optimizer.step()
    step()
    return measure_flops(step)


def run(case, device, variant, optimizers):
    with torch.device(device):
        model = case.build(variant)
    model.train()
    args, kwargs = batch2(*case.inputs(device))
    lines = []
    for name in optimizers:
        try:
            result = counted_step(model, args, kwargs, OPTIMIZERS[name](model.parameters()))
        except Exception as error:  # noqa: BLE001 -- a survey reports what failed and goes on
            lines.append(f"{name}: ERROR {type(error).__name__}: {str(error)[:120]}")
            continue
        uncounted = ",".join(row["operator"] for row in result["uncounted"])
        lines.append(f"{name}: {result['total']['status']} {result['total']['known_value']:.4g}"
                     + (f" uncounted {uncounted}" if uncounted else ""))
    return lines


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    cases = [*EXTRA, *t.CASES]
    for case in cases:
        for device, variant in case.runs():
            optimizers = ["adamw"] if quick else list(OPTIMIZERS)
            start = time.perf_counter()
            for line in run(case, device, variant, optimizers):
                print(f"{case.library}:{case.model}:{variant or '-'}:{device} {line}", flush=True)
            print(f"  ({time.perf_counter() - start:.1f} s)", flush=True)
