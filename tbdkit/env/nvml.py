"""Which NVML device is the framework's GPU: by the UUID or PCI bus id the adapter reports.

CUDA numbers GPUs fastest first (CUDA_DEVICE_ORDER's default) and only among CUDA_VISIBLE_DEVICES;
NVML numbers every GPU of the machine by PCI bus id. The framework's "cuda:0" is therefore NVML's
index 0 only by chance, so the index is used alone only where it cannot be wrong (NVML sees one GPU).
"""

from __future__ import annotations

from typing import Any


def nvml_uuid(uuid: str) -> str:
    """NVML's spelling of a UUID: "GPU-" (or "MIG-") then the 36-character form."""
    return uuid if uuid[:4] in ("GPU-", "MIG-") else f"GPU-{uuid}"


def nvml_handle(nvml: Any, cuda_index: int, uuid: str | None = None, pci_bus_id: str | None = None) -> tuple[Any, str]:
    """(NVML handle, how it was chosen); raises LookupError with the reason when the GPU cannot be told apart."""
    errors = []
    if uuid:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(nvml_uuid(uuid)), f"NVML device with UUID {nvml_uuid(uuid)}"
        except Exception as exc:
            errors.append(f"UUID {uuid}: {exc}")
    if pci_bus_id:
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id), f"NVML device at PCI bus id {pci_bus_id}"
        except Exception as exc:
            errors.append(f"PCI bus id {pci_bus_id}: {exc}")
    if nvml.nvmlDeviceGetCount() == 1:
        return nvml.nvmlDeviceGetHandleByIndex(0), "the only NVML device"
    raise LookupError(
        "the framework's GPU could not be matched to an NVML device ("
        + ("; ".join(errors) or "the adapter reported neither its UUID nor its PCI bus id")
        + "), and NVML's index order may differ from CUDA's"
    )
