"""Does a CUDA graph holding cuDNN's LSTM survive eager cuDNN LSTM calls between its replays?

The `mini` ATR Table 4 on an H200 lost its RNNSearch+LSTM row to an illegal memory access at the first
training-graph replay after a validation (README.md, "The third H200 session"); its graphs held cuDNN's LSTM
through rnmt's `torch_layer` (weights substituted by torch.func.functional_call, so no flat weight buffer),
and the validation had run the same layer eagerly on packed batches. Each case here captures a forward and
backward of `torch_layer` at batch 64, replays it, runs one kind of eager call, and replays again, each case
in a process of its own (an illegal address ends the process's CUDA context):

    python3 benchmarks/gpu/probe-cudnn-in-graphs.py            # every case, one line each
    compute-sanitizer python3 benchmarks/gpu/probe-cudnn-in-graphs.py packed   # the faulting kernel's name

Cases: `none` (no eager call between), `same` (the captured shape, unpacked), `other-batch` (batch 100,
unpacked), `packed` (batch 100, packed lengths, as a validation), `packed-cudnn-off` (the same with cuDNN
disabled around the eager call). Prints `survived` or the error for each.
"""

from __future__ import annotations

import subprocess
import sys

CASES = ("none", "same", "other-batch", "packed", "packed-cudnn-off")
HIDDEN = 256


def probe(case: str) -> None:
    import torch

    from rnmt.cells import build_cell

    dev = torch.device("cuda")
    torch.manual_seed(0)
    cell = build_cell("lstm", HIDDEN, HIDDEN).to(dev)
    x = torch.randn(64, 24, HIDDEN, device=dev, requires_grad=True)
    state = torch.zeros(64, 2 * HIDDEN, device=dev)

    def step() -> torch.Tensor:
        got = cell.torch_layer(x, None, state)
        assert got is not None
        loss = got[0].pow(2).mean()
        loss.backward()
        return loss.detach()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = step()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    before = loss.item()
    with torch.no_grad():
        if case in ("same", "other-batch"):
            b = 64 if case == "same" else 100
            cell.torch_layer(torch.randn(b, 24, HIDDEN, device=dev), None, torch.zeros(b, 2 * HIDDEN, device=dev))
        elif case.startswith("packed"):
            lengths = torch.randint(1, 31, (100,), device=dev)
            lengths[0] = 30
            with torch.backends.cudnn.flags(enabled=case != "packed-cudnn-off"):
                cell.torch_layer(torch.randn(100, 30, HIDDEN, device=dev), lengths,
                                 torch.zeros(100, 2 * HIDDEN, device=dev))
    torch.cuda.synchronize()
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    print(f"{case}: survived (loss {before:.6f} → {loss.item():.6f})", flush=True)


def main(argv: list[str]) -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to probe")
        return 0
    if argv:
        probe(argv[0])
        return 0
    for case in CASES:
        done = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True, timeout=120)
        lines = (done.stdout + done.stderr).strip().splitlines()
        error = next((line for line in lines if "Error" in line), lines[-1] if lines else "no output")
        print(lines[-1] if done.returncode == 0 else f"{case}: failed ({error.strip()})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
