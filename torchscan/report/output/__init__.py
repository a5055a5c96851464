"""The files a build writes: documents from templates and charts, each entry drawn once (the render cache)."""
