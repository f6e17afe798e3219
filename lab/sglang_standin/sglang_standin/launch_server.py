"""`python -m sglang_standin.launch_server <SGLang flags>`: the stand-in's equivalent of
`python -m sglang.launch_server`. Lifecycle and faults: see README.md.

This file is the server process's lifecycle: parse the flags, form the multi-node group, "load the weights",
compile and capture, listen (http_handler.py), warm up, then on a signal drain and exit as real 0.5.11 does."""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Optional

from sglang_standin import jit_cache, multinode
from sglang_standin.http_handler import Server, make_handler
from sglang_standin.logs import crash, env_float, log
from sglang_standin.server_args import prepare_server_args
from sglang_standin.serving_state import State


def wait_for_stop(stop: threading.Event, state: Optional[State] = None) -> None:
    """Wait for the stop event in short slices. A bare stop.wait() can miss SIGTERM for good: when the kernel
    delivers the signal to another thread (a request handler sleeping), the main thread's futex wait is not
    interrupted, so Python never runs on_term (seen in ~1 of 5 recordings, launcher or not).

    With state, after a SIGTERM the server keeps listening for state.drain_s (SGLANG_STANDIN_DRAIN_S) while
    /health* answer 503 and the rest answers: real 0.5.11's sigterm_watchdog notices the signal on its next
    5-second tick (recorded: 2.7 s and 3.1 s of /health 503 and /v1/models 200 before the listener went)."""
    while not stop.wait(0.2):
        pass
    if state is not None and state.stopping and state.drain_s > 0:
        time.sleep(state.drain_s)


def hang(reason: str, stop: threading.Event) -> None:
    """Never progress; only a signal ends it (exit 0, like a clean stop)."""
    log(f"stand-in fault: hanging ({reason})")
    wait_for_stop(stop)
    log("stand-in stopped while hanging")
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    args = prepare_server_args(sys.argv[1:] if argv is None else argv)
    state = State(args)
    args.check_server_args()  # real: Engine._launch_subprocesses, before the server_args line
    log(f"server_args={args!r}")
    load_s = env_float("SGLANG_STANDIN_LOAD_S", 2.0)
    warmup_s = env_float("SGLANG_STANDIN_WARMUP_S", 1.0)

    stop = threading.Event()

    def on_term(signum, _frame):
        if signum == signal.SIGTERM and (args.node_rank or 0) >= 1:
            # real ranks >= 1 install no SIGTERM handler (no tokenizer manager): the process dies of the signal
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if signum == signal.SIGTERM:  # real 0.5.11 (SignalHandler.sigterm_handler, an asyncio handler: no args)
            log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        else:
            log(f"Received signal {signum}; shutting down")
        state.stopping = True
        if state.fault == "slow_shutdown":
            delay = env_float("SGLANG_STANDIN_SHUTDOWN_S", 10.0)
            log(f"stand-in fault: slow shutdown, still answering for {delay:.1f}s")
            threading.Timer(delay, stop.set).start()
        else:
            stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    # Multi-node (multinode.py): the group forms before the weights load (real: init_torch_distributed in
    # ModelRunner.__init__); nothing listens on --port meanwhile; a member lost later ends this node (exit -9).
    http_up = threading.Event()
    if multinode.is_multinode(args):
        try:
            group = multinode.Group(args, log, stop)
            group.on_lost = lambda err: multinode.die(err, log, running=http_up.is_set())
            if not group.form():
                return 0
        except ValueError as exc:  # a malformed --dist-init-addr (real: NetworkAddress.parse in the scheduler)
            multinode.die(multinode.GroupError("ValueError", str(exc)), log)
        except multinode.GroupError as exc:
            multinode.die(exc, log)
    log(f"Load weight begin. model_path={args.model_path} tp_size={args.tp_size}")
    if state.fault == "crash_loading":
        stop.wait(load_s / 2)
        crash("model_runner", "CUDA out of memory while loading weights (stand-in fault crash_loading)")
    if state.fault == "hang":
        hang("while loading weights", stop)
    if stop.wait(load_s):
        return 0
    log("Load weight end.")
    # real SGLang JIT-compiles its kernels into HOME here (during CUDA graph capture): a warm cache skips that
    if jit_cache.warm_up(args, env_float("SGLANG_STANDIN_COMPILE_S", 2.0), stop.wait, log):
        return 0
    spec_budget = args.speculative_ddtree_budget or 0
    if not args.disable_cuda_graph:
        log("Capture cuda graph begin. This can take up to several minutes.")
        if (os.environ.get("SGLANG_STANDIN_GPU_CC") == "10.3" and spec_budget > 8
                and (args.speculative_algorithm or "").upper() == "DDTREE"):
            crash("cuda_graph_runner", f"CUDA error: an illegal memory access was encountered (sm_103, DDTree "
                                       f"budget {spec_budget} > 8 with CUDA graphs; stand-in fault)")
        log("Capture cuda graph end.")

    if state.fault == "bind_then_die":
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        sock.listen(16)
        log(f"Uvicorn running on http://{args.host}:{args.port}")
        time.sleep(min(0.5, warmup_s))
        crash("tokenizer_manager", "detokenizer died right after bind (stand-in fault bind_then_die)")

    if (args.node_rank or 0) >= 1:  # real ranks >= 1: no API, a dummy /ping, /health, /health_generate only
        httpd = multinode.dummy_health_server(args.host, args.port, bool(args.enable_metrics), log)
    else:
        httpd = Server((args.host, args.port), make_handler(state))
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        log(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
        http_up.set()
    if (args.node_rank or 0) == 0:
        log("Start of warmup: /health answers 503 until it finishes.")
        if state.fault == "crash_warmup":
            stop.wait(warmup_s / 2)
            crash("warmup", "illegal memory access during the warmup request (stand-in fault crash_warmup)")
        if state.fault == "hang_warmup":
            hang("during warmup, /health stays 503", stop)
        if not stop.wait(warmup_s):
            state.warmed_up()
            log("The server is fired up and ready to roll!")
    wait_for_stop(stop, state)
    httpd.shutdown()
    httpd.server_close()
    # Real 0.5.11 (TokenizerManager.sigterm_watchdog): drain, then kill_process_tree(os.getpid(),
    # include_parent=True) SIGKILLs the tree and itself: exit status -9 even after a clean drain.
    logged_at = 0.0
    while True:
        remain_num_req = state.timing.running
        if remain_num_req == 0 or time.monotonic() - logged_at >= 5:
            logged_at = time.monotonic()
            remaining_rids = [f"standin-{i}" for i in range(remain_num_req)]
            log(f"Gracefully exiting... Remaining number of requests {remain_num_req}. "
                f"Remaining requests {remaining_rids=}.")
        if remain_num_req == 0:
            break
        time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGKILL)
    return 0  # not reached


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ValueError as exc:
        traceback.print_exc()
        log(f"invalid server arguments: {exc}")
        sys.exit(1)
