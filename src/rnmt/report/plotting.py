"""Writing a matplotlib figure: a PNG for screens and the report, and the same figure as a PDF beside
it (`<name>.pdf`, vector, for papers), each written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rnmt.io import atomic_writer


def save(fig: Any, out_png: str | Path, dpi: int = 120) -> Path:
    """Write `fig` to `out_png` and to the PDF beside it; close it. Returns the PDF's path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out_pdf = Path(out_png).with_suffix(".pdf")
    with atomic_writer(out_png, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi)
    with atomic_writer(out_pdf, "wb") as f:
        fig.savefig(f, format="pdf")
    plt.close(fig)
    return out_pdf
