"""Device panel: NVML's view of the GPU beside the allocator's reserved bytes.

The difference is memory PyTorch's caching allocator does not manage: the
CUDA context, NCCL buffers, cuBLAS workspaces, other libraries and other
processes.  Without NVML (no driver, no GPU, no nvidia-ml-py) the panel says
so in one calm line.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout, QLabel, QVBoxLayout, QWidget

from ...model.analysis.gpu_accounting import GpuHolder, split_gpu
from ...model.core.units import format_bytes, plural
from ...model.live.nvml import NvmlInfo

ROWS = {
    "gpu": ("GPU", "The device the attached process works on (NVML)"),
    "total": ("Total", "The device's memory (NVML: nvmlDeviceGetMemoryInfo total)"),
    "used": ("Used (device)", "Memory in use on the device by every process (NVML used)"),
    "free": ("Free (device)", "Memory nobody uses yet (NVML free)"),
    "process": (
        "Used by the process",
        "This process's memory on the device (NVML per-process "
        "figure; some drivers, e.g. in containers, do not report it)",
    ),
    "reserved": (
        "Reserved by PyTorch",
        "The caching allocator's segments: "
        "memory_stats()['reserved_bytes.all.current'] of the same moment",
    ),
    "outside": (
        "Outside the allocator",
        "Used by the process minus reserved by PyTorch: the "
        "CUDA context, NCCL buffers, cuBLAS/cuDNN workspaces and other non-PyTorch "
        "allocations. Without a per-process figure: device used minus reserved "
        "(includes other processes).",
    ),
    "others": (
        "Other processes",
        "Every other process's memory on this device (NVML per-process figures), the largest named",
    ),
    "unexplained": (
        "Unexplained",
        "Device used minus this process and the other processes: "
        "memory no process is charged for (the driver's own), processes whose "
        "memory the driver does not report, and, without a per-process figure for "
        "this process, its memory outside the allocator. Shown, never hidden.",
    ),
}


class DevicePanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setEnabled(False)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
        self.values: dict[str, QLabel] = {}
        for key, (title, tip) in ROWS.items():
            label = QLabel(title)
            value = QLabel("–")
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            for w in (label, value):
                w.setToolTip(tip)
            form.addRow(label, value)
            self.values[key] = value
        lay.addLayout(form)
        lay.addWidget(self.message)
        lay.addStretch(1)
        self.info: NvmlInfo | None = None
        self.reserved: int | None = None
        self.pid: int | None = None
        self.device: int | None = None

    def set_target(self, pid: int | None, device: int | None) -> None:
        self.pid, self.device = pid, device
        self._refresh()

    def set_nvml(self, info: NvmlInfo | None) -> None:
        self.info = info
        self._refresh()

    def set_reserved(self, reserved: int | None) -> None:
        self.reserved = reserved
        self._refresh()

    def text(self) -> str:
        """The panel as plain text (tests, copy)."""
        lines = [f"{ROWS[k][0]}: {v.text()}" for k, v in self.values.items()]
        if self.message.text():
            lines.append(self.message.text())
        return "\n".join(lines)

    def _refresh(self) -> None:
        v = self.values
        v["reserved"].setText(format_bytes(self.reserved) if self.reserved is not None else "–")
        info = self.info
        if info is None or not info.available:
            for key in (
                "gpu",
                "total",
                "used",
                "free",
                "process",
                "outside",
                "others",
                "unexplained",
            ):
                v[key].setText("–")
            self.message.setText(
                info.error
                if info is not None and info.error
                else "NVML: waiting for the first reading"
            )
            return
        dev = next((d for d in info.devices if d.index == (self.device or 0)), None)
        if dev is None:
            self.message.setText(f"NVML sees no device {self.device}")
            return
        self.message.setText("")
        v["gpu"].setText(f"{dev.index}: {dev.name}")
        v["total"].setText(format_bytes(dev.total_bytes))
        v["used"].setText(format_bytes(dev.used_bytes))
        v["free"].setText(format_bytes(dev.free_bytes))
        proc = info.process_bytes(self.pid, dev.index) if self.pid is not None else None
        v["process"].setText(format_bytes(proc) if proc is not None else "not reported")
        if self.reserved is None:
            v["outside"].setText("–")
        elif proc is not None:
            v["outside"].setText(format_bytes(max(0, proc - self.reserved)))
        else:
            v["outside"].setText(
                format_bytes(max(0, dev.used_bytes - self.reserved)) + " (device-wide)"
            )
        # The whole device split the way a snapshot's sidecar is (analysis.gpu_accounting).
        others = sorted(
            (GpuHolder(p.pid, p.used_bytes, None) for p in dev.processes if p.pid != self.pid),
            key=lambda h: -(h.used_bytes or 0),
        )
        acc = split_gpu(dev.total_bytes, dev.free_bytes, self.reserved or 0, proc, others)
        top = others[0] if others and others[0].used_bytes else None
        v["others"].setText(
            "none"
            if not others
            else f"{format_bytes(acc.others_bytes)} in "
            f"{plural(len(others), 'process', 'processes')}"
            + (
                f" (largest: pid {top.pid}, {format_bytes(top.used_bytes or 0)})"
                if top is not None
                else ""
            )
        )
        v["unexplained"].setText(
            format_bytes(acc.unexplained_bytes) if self.reserved is not None else "–"
        )
