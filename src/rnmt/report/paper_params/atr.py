"""ATR paper, Table 4 (WMT14 En-De, 40K BPE vocabulary per side; emb 620, hidden 1000).

Design details the paper leaves open, taken from its public reference code (github.com/bzhangGo/zero,
models/rnnsearch.py): the additive attention's hidden size equals the memory size (2d for the
bidirectional encoder, d for CA, whose source encoding is the backward output only); the output layer
is tied to the target embeddings (the readout's logits go through the target embedding matrix); the
decoder init covers the whole state (h and c for the LSTM).
"""

from rnmt.report.paper_params import ParamRow

V = 40_000          # "We set the vocabulary size of both source and target languages to 40K" (section 4.2)

ROWS = [
    ParamRow("atr-table4", "RNNSearch+GRU", V, V),
    ParamRow("atr-table4", "RNNSearch+LSTM", V, V),
    ParamRow("atr-table4", "RNNSearch+RAN", V, V),
    ParamRow("atr-table4", "RNNSearch+ATR", V, V),
    ParamRow("atr-table4", "RNNSearch+ATR+CA", V, V),
    ParamRow("atr-table4", "DeepRNNSearch", V, V,
             miss="the paper describes DeepRNNSearch only as 'a deep GRU RNNSearch (Wu et al. 2016) with 5 layers'; "
                  "GNMT's stacking (1 bidirectional + 4 residual layers each side, context into every decoder layer "
                  "above the first, attention over the top encoder layer) gives 130.9M with zero initial states "
                  "(135.9M with a per-layer bridge); the missing ~12M are in structure the paper does not give"),
    ParamRow("atr-table4", "Transformer", V, V,
             note="section 5.2 gives emb 512 and filter 2048 only; 40K vocabularies per side as for every model "
                  "(section 4.2), target embedding tied to the softmax as in the RNNSearch rows: 4+4 layers give "
                  "70.39M (+0.26%). Base 6+6 gives 85.10M tied / 105.58M untied, 64.62M with one joint 40K "
                  "vocabulary tied three ways; 5+3 69.33M, 3+5 71.44M, 4+4 untied 90.87M"),
]
