"""A ctrl-c stops the local stack from its main thread; a worker's polars call in progress (a mirror
part being written) finishes, never interrupted by polars' own SIGINT handler."""
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import io, os, signal, threading, time
    import chalicelib.local.__main__ as local

    local.take_stop_signals()
    import polars as pl

    frame = pl.DataFrame({"a": range(1_000_000), "b": [str(i) for i in range(1_000_000)]})
    started, outcome = threading.Event(), []

    def write_parts():
        try:
            for _ in range(15):
                started.set()
                frame.write_parquet(io.BytesIO(), compression="zstd")
            outcome.append("written")
        except BaseException as error:
            outcome.append(repr(error))

    worker = threading.Thread(target=write_parts)
    worker.start()
    started.wait()
    time.sleep(0.3)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(60)
    except KeyboardInterrupt:
        outcome.append("main thread stopping")
    worker.join()
    print(outcome)
""")


def test_a_ctrl_c_reaches_the_main_thread_alone_not_a_workers_polars_call():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['main thread stopping', 'written']", done.stdout + done.stderr
