"""The pinned stack: what requirements.txt asks for, and what is installed."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from helpers.paths import ROOT

GPU_ONLY = {"vllm"}  # absent on CPU by design


@dataclass(frozen=True)
class PinCheck:
    package: str
    pinned: str
    installed: str | None

    @property
    def ok(self) -> bool:
        return self.installed == self.pinned


def read_pins(path=ROOT / "requirements.txt") -> dict[str, str]:
    """{package: version} for every `name==version` line."""
    pins = {}
    for line in path.read_text().splitlines():
        spec = line.split("#")[0].strip()
        if "==" in spec:
            name, pinned = spec.split("==")
            pins[name.strip()] = pinned.strip()
    return pins


def installed_version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def check_pins(pins: dict[str, str] | None = None) -> list[PinCheck]:
    """Compare each pin with the installed version."""
    pins = read_pins() if pins is None else pins
    return [PinCheck(name, pinned, installed_version(name)) for name, pinned in pins.items()]


def pin_report(checks: list[PinCheck]) -> str:
    """A fixed-width table; a mismatch line says how to fix it."""
    lines = [f"{'package':<14} {'pinned':<12} {'installed':<12}"]
    for check in checks:
        mark = "ok" if check.ok else "MISMATCH: rerun the setup cell (or `make`)"
        lines.append(f"{check.package:<14} {check.pinned:<12} {check.installed or '-':<12} {mark}")
    return "\n".join(lines)
