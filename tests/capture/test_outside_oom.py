"""Out-of-memory errors outside PyTorch's allocator (cuBLAS, cuDNN, NCCL, ...), without a GPU.

The double stands in at the CUDA boundary only: the fake backend's ``library_call``
raises what torch raises when a library's own device allocation fails (the exact
texts of torch's checks), with no OOM observer called, as on a real GPU.  The
recorder, the runner, the sidecar and the whole-GPU table are the real ones.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from capture_fakes import FakeBackend, FakeOutOfMemoryError
from capture_helpers import run_fake_capture, run_python, sidecar, snapshots

from vramscope.capture import outside, record
from vramscope.capture.backend import set_backend

MiB = 1 << 20
GiB = 1 << 30

CUBLAS = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
CUBLASLT = (
    "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasLtMatmul( ltHandle, "
    "computeDesc.descriptor(), &alpha_val, mat1_ptr, Adesc.descriptor(), ...)`"
)
CUDNN = "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"
CUDNN9 = "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"
CUDA_OOM = (
    "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at "
    "some other API call, so the stacktrace below might be incorrect.\nFor debugging "
    "consider passing CUDA_LAUNCH_BLOCKING=1"
)
CUDA_EXT = "my_ext.cu:88: cudaMalloc failed: cudaErrorMemoryAllocation"
NCCL = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, "
    "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3\n"
    "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
    "Cuda failure 'out of memory'"
)
NCCL_CALLOC = "NCCL WARN Failed to CUDA calloc 10485760 bytes"


@pytest.mark.parametrize(
    "text, library",
    [
        (CUBLAS, "cuBLAS"),
        (CUBLASLT, "cuBLASLt"),
        (CUDNN, "cuDNN"),
        (CUDNN9, "cuDNN"),
        (CUDA_OOM, "CUDA"),
        (CUDA_EXT, "CUDA"),
        ("CUDA driver error: out of memory", "CUDA"),
        (NCCL, "NCCL"),
        (NCCL_CALLOC, "NCCL"),
    ],
)
def test_each_library_s_allocation_failure_is_named(text, library):
    assert outside.library_of(text) == library


@pytest.mark.parametrize(
    "text",
    [
        # The allocator's own OOM: its observer dumps it, with the request.
        "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.1 GiB",
        "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, ...)`",
        "CUDA error: an illegal memory access was encountered",
        "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",  # host memory
        "NCCL error in: ProcessGroupNCCL.cpp:1970, internal error, NCCL version 2.27.3",
        "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes",
        "",
    ],
)
def test_other_errors_are_not_outside_allocator_ooms(text):
    assert outside.library_of(text) is None


class WholeGpuFake(FakeBackend):
    """The fake CUDA with the whole-GPU calls; ``free`` is what the device has free now."""

    def __init__(self) -> None:
        super().__init__(limit=4 * GiB)
        self.free = 80 * GiB
        self.free_seen: list[int] = []

    def mem_get_info(self, device: int) -> tuple[int, int]:
        self.free_seen.append(self.free)
        return self.free, 80 * GiB

    def device_uuid(self, device: int) -> str:
        return "5a1b2c3d-0000-1111-2222-333344445555"


@pytest.fixture
def gpu(monkeypatch) -> WholeGpuFake:
    from vramscope.capture import gpu as gpu_mod

    fb = WholeGpuFake()
    set_backend(fb)
    # No NVML or nvidia-smi on the test machine: the process list is said to be missing.
    monkeypatch.setattr(gpu_mod, "_nvml_module", lambda: (_ for _ in ()).throw(ImportError()))
    monkeypatch.setattr(gpu_mod, "_run_smi", lambda: (_ for _ in ()).throw(FileNotFoundError()))
    return fb


def backward_step(fb: WholeGpuFake) -> None:
    fb.alloc(64 * MiB)
    fb.free = 17 * MiB + 960 * 1024  # what the GPU has left when cuBLAS asks
    fb.library_call(CUBLAS)


def test_record_writes_an_oom_snapshot_and_the_exception_goes_on_unchanged(tmp_path, gpu):
    raised = None
    with pytest.raises(RuntimeError) as info:
        with record(out=tmp_path) as rec:
            try:
                backward_step(gpu)
            except RuntimeError as exc:
                raised = exc
                raise
    assert info.value is raised and str(info.value) == CUBLAS  # the program's own exception
    [oom] = snapshots(tmp_path, "oom")
    assert rec.last_oom_path == oom
    side = sidecar(oom)
    assert side["reason"] == "oom"
    found = side["outside_allocator_oom"]
    assert found["library"] == "cuBLAS" and found["error"] == CUBLAS
    assert found["exception_type"] == "RuntimeError"
    # Innermost last: the library call, then the step, then this test.
    assert found["stack"][-1].endswith(" library_call")
    assert found["stack"][-2].endswith(" backward_step")
    assert any(
        f.endswith(" test_record_writes_an_oom_snapshot_and_the_exception_goes_on_unchanged")
        for f in found["stack"]
    )
    assert side["oom_message"] == CUBLAS
    # The whole-GPU table of that moment, and the allocator's counters beside it.
    assert side["gpu_memory"]["free_bytes"] == gpu.free == gpu.free_seen[0]
    assert side["memory_stats"]["reserved_bytes.all.current"] == 64 * MiB
    assert "oom_request" not in side  # no allocator request failed
    [exit_snap] = snapshots(tmp_path, "exit")
    assert "outside_allocator_oom" not in sidecar(exit_snap)
    assert sidecar(exit_snap)["exception"] == f"RuntimeError: {CUBLAS}"


def test_an_allocator_oom_is_left_to_the_observer(tmp_path, gpu):
    gpu.limit = 64 * MiB
    with pytest.raises(FakeOutOfMemoryError):
        with record(out=tmp_path):
            gpu.alloc(128 * MiB)
    [oom] = snapshots(tmp_path, "oom")
    side = sidecar(oom)
    assert side["oom_request"] == 128 * MiB and "outside_allocator_oom" not in side


def test_found_through_the_exception_it_was_raised_from(tmp_path, gpu):
    class StepFailed(Exception):
        pass

    with pytest.raises(StepFailed):
        with record(out=tmp_path, dump_on_exit=False):
            try:
                gpu.library_call(NCCL)
            except RuntimeError as exc:
                raise StepFailed("all_reduce of bucket 3 failed") from exc
    [oom] = snapshots(tmp_path, "oom")
    found = sidecar(oom)["outside_allocator_oom"]
    assert found["library"] == "NCCL" and found["exception_type"] == "RuntimeError"
    assert found["error"] == NCCL.splitlines()[0]
    assert sidecar(oom)["oom_message"] == NCCL


def test_other_exceptions_and_max_oom_dumps_write_no_oom_snapshot(tmp_path, gpu):
    with pytest.raises(RuntimeError):
        with record(out=tmp_path / "a"):
            gpu.library_call("CUDA error: an illegal memory access was encountered")
    assert snapshots(tmp_path / "a", "oom") == [] and len(snapshots(tmp_path / "a")) == 1
    with pytest.raises(RuntimeError):
        with record(out=tmp_path / "b", max_oom_dumps=0, dump_on_exit=False):
            gpu.library_call(CUBLAS)
    assert snapshots(tmp_path / "b") == []
    with pytest.raises(RuntimeError):
        with record(out=tmp_path / "c", oom=False, dump_on_exit=False):
            gpu.library_call(CUBLAS)
    assert snapshots(tmp_path / "c") == []


CUBLAS_SCRIPT = textwrap.dedent(
    f"""
    from vramscope.capture.backend import get_backend
    gpu = get_backend()          # the fake CUDA of capture_fakerun.py

    def backward():
        gpu.alloc(8 << 20)
        gpu.library_call({CUBLAS!r})

    def train():
        backward()

    train()
    print("not reached")
    """
)


def test_runner_writes_the_oom_snapshot_and_prints_the_program_s_traceback(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(CUBLAS_SCRIPT)
    out = tmp_path / "o"
    r = run_fake_capture(["--out", str(out), str(script)], cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "not reached" not in r.stdout
    assert r.stderr.rstrip().endswith(f"RuntimeError: {CUBLAS}")
    assert "runner.py" not in r.stderr
    [oom] = snapshots(out, "oom")
    side = sidecar(oom)
    found = side["outside_allocator_oom"]
    assert found["library"] == "cuBLAS" and found["error"] == CUBLAS
    # The script's frames only (no runner, no runpy), innermost last.
    script_frames = [f for f in found["stack"] if f.startswith(str(script))]
    assert [f.rsplit(" ", 1)[1] for f in script_frames] == ["<module>", "train", "backward"]
    assert found["stack"][0] == script_frames[0] and found["stack"][-1].endswith(" library_call")
    assert not any("runner.py" in f or "runpy" in f for f in found["stack"])
    assert "outside PyTorch's allocator (cuBLAS)" in r.stderr
    assert r.stderr.index(f"wrote {oom}") < r.stderr.index("Traceback")
    assert json.loads(oom.with_suffix(".json").read_text())["argv"] == [str(script)]


# A program that calls start() (no with block): its uncaught exception reaches only the
# interpreter's hooks.  The script's own hook was installed first, so the capture's must
# call it; after stop() the hooks are the script's again.
START_SCRIPT = textwrap.dedent(
    f"""
    import sys, threading
    sys.path.insert(1, {str(Path(__file__).parent)!r})
    from capture_fakes import FakeBackend
    from vramscope.capture import backend
    import vramscope.capture as vc

    gpu = FakeBackend(initialized=False)
    backend.set_backend(gpu)

    def mine(t, e, tb):
        print("program's hook:", t.__name__, e, file=sys.stderr)
        sys.__excepthook__(t, e, tb)

    def mine_thread(args):
        print("program's thread hook:", args.exc_value, file=sys.stderr)

    sys.excepthook, threading.excepthook = mine, mine_thread
    vc.start(out=sys.argv[2])

    def backward():
        gpu.alloc(8 << 20)
        gpu.library_call({CUBLAS!r})

    if sys.argv[1] == "thread":
        t = threading.Thread(target=backward)
        t.start(); t.join()
        vc.stop()
        print("restored:", sys.excepthook is mine, threading.excepthook is mine_thread)
    elif sys.argv[1] == "stopped":
        vc.stop()
        backward()
    elif sys.argv[1] == "nested":
        with vc.record(out=sys.argv[2], dump_on_exit=False):
            backward()
    else:
        backward()
    """
)


def _start_script(tmp_path, how):
    script = tmp_path / "start_train.py"
    script.write_text(START_SCRIPT)
    out = tmp_path / how
    return run_python([str(script), how, str(out)], cwd=tmp_path), out


def test_start_without_a_with_block_writes_the_oom_snapshot_of_the_uncaught_error(tmp_path):
    r, out = _start_script(tmp_path, "main")
    assert r.returncode == 1, r.stderr
    [oom] = snapshots(out, "oom")
    found = sidecar(oom)["outside_allocator_oom"]
    assert found["library"] == "cuBLAS" and found["error"] == CUBLAS
    assert found["stack"][-2].endswith(" backward") and found["stack"][-1].endswith(" library_call")
    assert sidecar(oom)["memory_stats"]["reserved_bytes.all.current"] == 8 * MiB
    # The program's own hook ran after the dump, with the exception unchanged.
    assert f"program's hook: RuntimeError {CUBLAS}" in r.stderr
    assert r.stderr.rstrip().endswith(f"RuntimeError: {CUBLAS}")
    assert r.stderr.index(f"wrote {oom}") < r.stderr.index("program's hook")


def test_a_thread_dying_of_it_is_caught_and_stop_restores_the_hooks(tmp_path):
    r, out = _start_script(tmp_path, "thread")
    assert r.returncode == 0, r.stderr
    [oom] = snapshots(out, "oom")
    assert sidecar(oom)["outside_allocator_oom"]["error"] == CUBLAS
    assert f"program's thread hook: {CUBLAS}" in r.stderr
    assert "restored: True True" in r.stdout


def test_after_stop_an_uncaught_error_writes_nothing(tmp_path):
    r, out = _start_script(tmp_path, "stopped")
    assert r.returncode == 1 and f"program's hook: RuntimeError {CUBLAS}" in r.stderr
    assert snapshots(out, "oom") == []


def test_the_with_block_s_dump_is_not_written_again_by_the_hook(tmp_path):
    """A with block inside a start() recording: its exit dumps the error; the hook, still
    installed for the outer recorder, sees the same exception and writes nothing more."""
    r, out = _start_script(tmp_path, "nested")
    assert r.returncode == 1, r.stderr
    assert len(snapshots(out, "oom")) == 1 and r.stderr.count("wrote ") == 1, r.stderr


def test_a_caught_error_s_frames_are_not_kept_alive(tmp_path, gpu):
    """A program that catches the library's error and goes on gets its memory back: the
    capture keeps no reference to the exception (whose frames hold its tensors)."""
    import gc
    import weakref

    class Tensor:
        pass

    def step():
        held = Tensor()
        seen.append(weakref.ref(held))
        gpu.library_call(CUBLAS)

    seen: list = []
    try:
        with record(out=tmp_path):
            step()
    except RuntimeError:
        pass
    gc.collect()
    assert len(snapshots(tmp_path, "oom")) == 1 and seen[0]() is None
