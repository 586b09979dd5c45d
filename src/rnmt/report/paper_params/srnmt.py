"""SR-NMT paper, Table 2, first part (WMT14 En-De; every layer's output size 500, section 4).

The vocabulary size is not stated (BPE with 32K merge rules, section 4.1). We assume one size V for
both sides and solve the LSTM 2L row for it: LSTM 2L has 9,017,500 parameters besides the vocabulary
and 1,501·V with it (source and target embeddings 500·V each, generator 500·V + V), so
62M → V = 35,298. Every other row then follows with no further free choice.

Left out: the rows "Setting of (Lei et al., 2017b)" (their own systems, whose vocabulary the paper says
is unknown and explains their larger counts), and the Transformer, GNMT and ConvS2S rows (other
papers' systems, architectures outside this model zoo, no shared vocabulary).
"""

from rnmt.report.paper_params import ParamRow

V = 35_298
VOCAB = f"V = {V} both sides (not stated; solved from LSTM 2L = 62M)"
TOL = 0.02
_OPENNMT = ("OpenNMT-py baseline: bidirectional encoder 250 per direction, input feeding, MLP attention, "
            "untied generator with bias")
_SRNMT = ("paper eqs. 3.1-3.2: LN without bias, per-layer layer-normalised MLP attention (W_as, W_ah, v), "
          "W_s/W_c with LN, untied generator with bias")


def _row(system: str, note: str) -> ParamRow:
    return ParamRow("srnmt-table2", system, V, V, f"{VOCAB}; {note}", TOL)


ROWS = [
    _row("LSTM 2L", _OPENNMT + " (row fixes V)"),
    _row("LSTM 3L", _OPENNMT),
    _row("LSTM 5L", _OPENNMT),
    _row("SRU 3L", "SRU (Lei et al. 2017) with gate biases only; no input feeding, as section 2 notes SRU decoders "
                   "run in parallel over time (no dependency on the previous output); with input feeding +2.5%"),
    *(_row(f"SR-NMT {n}L", _SRNMT) for n in range(1, 11)),
]
