"""Decoding settings: one typed class with every default (the config schema's `decode` block is generated
from it; config.yaml's `decode:` and the tables hold only what they change)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rnmt.settings import checked, setting

PENALTIES = ("average", "gnmt", "none")


@dataclass(frozen=True)
class DecodeSettings:
    beam: int = setting(10, "beam size (ATR 10, DTMT 4, SR-NMT 5)", minimum=1)
    batch_size: int = setting(50, "sentences decoded together", minimum=1)
    length_penalty: str = setting("average", "how finished hypotheses are compared: average (log-likelihood per "
                                             "token, ATR), gnmt (((5+|y|)/6)^alpha, DTMT) or none (SR-NMT)",
                                  enum=list(PENALTIES))
    alpha: float = setting(0.6, "gnmt's alpha", minimum=0)
    max_len_ratio: float = setting(2.0, "a translation has at most ratio x source length + extra tokens",
                                   exclusiveMinimum=0)
    max_len_extra: int = setting(10, minimum=0)
    greedy_floor: bool = setting(False, "let greedy search's hypothesis replace the beam's when it scores higher "
                                        "(no paper does)")
    tf32: bool = setting(False, "on CUDA, the search's float32 products that torch hands to cuBLAS (the output layer, "
                                "the readout, the attention's and the cells' products) on the tensor cores in TF32: "
                                "operands rounded to 10 bits of mantissa, sums in float32 (faster where the products "
                                "are most of a step: a wide beam, a large vocabulary); a "
                                "hypothesis may differ from float32's where two scores lie within that rounding; "
                                "off: IEEE float32 products, as on a CPU (where the setting changes nothing)")
    average_last: int = setting(0, "decode the element-wise average of the model's last k validation checkpoints "
                                   "(train setting keep_checkpoints: k or more) instead of its best one (model.pt); "
                                   "0: model.pt", minimum=0)
    threads: int = setting(0, "CPU threads for torch; 0: torch's default", minimum=0)
    cuda_graphs: bool = setting(True, "on CUDA, each step of the search (the model's, the search's own and the "
                                      "reorder of the states) replayed as one CUDA graph, one per layout of "
                                      "shapes (the same hypotheses); off: every step eagerly")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecodeSettings:
        return checked(cls, d, "decoding")

    def search(self) -> dict[str, Any]:
        """The settings of the search itself (threads and cuda_graphs are how the job runs it, not what it
        finds; average_last chooses the weights)."""
        out = asdict(self)
        for engine in ("threads", "cuda_graphs", "average_last"):
            out.pop(engine)
        return out


DEFAULT = DecodeSettings()
SEARCH_KEYS = tuple(DEFAULT.search())
# settings added after tables were decoded: a row's translate job leaves them out where they are at their
# default, so the runs built before them keep their parameters and are not decoded again (planning/plan.py)
LEFT_OUT_AT_DEFAULT = ("average_last", "tf32")
