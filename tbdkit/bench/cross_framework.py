"""check-workload's checks across a model's frameworks, on the host: each framework's `describe` in its stack (one
run each), the first framework's canonical weights saved and loaded into every other (which must read them back
unchanged), then: the same network (parameters, canonical layers, FLOPs within 1%), the FLOPs the model's
parity.py expects, the non-trainable state its workload.toml lists, the model's own network checks (parity.py)
and the same outputs for the same weights on data.py's probe batch ([checks.outputs], tbdkit.spec.check_settings).

A model folder's optional parity.py (stdlib only: it runs on the host) may hold
    forward_flops(hp) -> int          one reference sample's forward FLOPs on the smoke preset
    FLOPS_REL: float                  how close (relative; 0: exactly), 0.01 where it does not say
    SAME_LAYER_KEYS: tuple[str, ...]  layer keys beyond name and params that every framework must share
    network_gaps(described, hp) -> list[str]   the model's own checks of the described networks (framework ->
                                      describe's JSON), one sentence per gap"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from tbdkit.core.errors import UserError
from tbdkit.core.user_files import tomllib
from tbdkit.env import stacks
from tbdkit.spec import catalog, check_settings

Outcome = dict[str, str]  # check, framework, status (passed | failed | skipped), detail
Described = dict[str, dict[str, Any]]  # framework -> describe's JSON (and "npz": its saved weights and outputs)


def _outcome(check: str, framework: str, gaps: list[str], passed: str) -> Outcome:
    status = "failed" if gaps else "passed"
    return {"check": check, "framework": framework, "status": status, "detail": "; ".join(gaps) or passed}


class DescribeServers:
    """One describe server (tbdkit.describe.server) per framework's stack, started on first use, ended by close():
    every describe of a model, and of the next model, runs from that one process."""

    def __init__(self) -> None:
        self._servers: dict[str, tuple[subprocess.Popen[str], Path]] = {}
        self._folder = tempfile.TemporaryDirectory(prefix="tbdkit-describe-")

    def __enter__(self) -> DescribeServers:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def start(self, frameworks: list[str]) -> None:
        """Starts each framework's server now, side by side: their imports overlap each other and whatever the
        caller does next, instead of each waiting for a model's first describe on that framework. A stack not
        installed here is left for that describe to report."""
        for framework in frameworks:
            with contextlib.suppress(UserError):
                self._server(framework)

    def _server(self, framework: str) -> tuple[subprocess.Popen[str], Path]:
        server = self._servers.get(framework)
        if server is None or server[0].poll() is not None:
            errors = Path(self._folder.name) / f"{framework}.server.err"
            with errors.open("w") as stderr:
                proc = subprocess.Popen([str(stacks.require(framework)), "-m", "tbdkit.describe.server", framework],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                        env=stacks.agent_env())  # fmt: skip
            server = self._servers[framework] = (proc, errors)
        return server

    def describe(self, framework: str, argv: list[str], folder: Path) -> tuple[int, str, str]:
        """`python -m tbdkit.describe argv` in the framework's stack: (exit status, stdout, stderr)."""
        (proc, errors), out, err = self._server(framework), folder / f"{framework}.out", folder / f"{framework}.err"
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"argv": argv, "stdout": str(out), "stderr": str(err)}) + "\n")
            proc.stdin.flush()
            reply = proc.stdout.readline()
        except BrokenPipeError:
            reply = ""
        if not reply:  # the server itself ended: its own last words
            proc.wait()
            return proc.returncode or 1, "", errors.read_text()
        return int(json.loads(reply)["exit"]), out.read_text(), err.read_text() if err.exists() else ""

    def close(self) -> None:
        for proc, _ in self._servers.values():
            # between requests a server holds nothing of its own: ended at once, not through the seconds an
            # interpreter holding a framework takes to shut down
            proc.terminate()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        self._servers.clear()
        self._folder.cleanup()


def describe_with_weights(model: catalog.Model, folder: Path, servers: DescribeServers) -> Described:
    """`python -m tbdkit.describe` of the smoke preset in each framework's stack, the first framework first: it
    saves its canonical weights and probe outputs, every other loads those weights and saves what it reads back
    and its own outputs (UserError naming the framework where one cannot)."""
    first, out = model.frameworks[0], {}
    for framework in model.frameworks:
        path = folder / f"{framework}.npz"
        args = ["--save", str(path)] + (["--weights-from", str(folder / f"{first}.npz")] if framework != first else [])
        argv = ["--model", model.name, "--framework", framework, "--preset", "smoke", *args]
        code, stdout, stderr = servers.describe(framework, argv, folder)
        if code != 0:
            last = (stderr.strip().splitlines() or ["no message"])[-1]
            raise UserError(f"Describing {model.name} on {framework} failed in its stack (exit {code}: "
                            f"{last}): fix the model file, or run `tbdkit setup {framework} --force`.")  # fmt: skip
        out[framework] = json.loads(stdout) | {"npz": path}
    return out


def parity_module(model: catalog.Model) -> ModuleType | None:
    """The model folder's parity.py, where it has one."""
    return catalog.load_module(model, "parity") if (model.folder / "parity.py").is_file() else None


def network_parity(model: catalog.Model, described: Described, also: tuple[str, ...] = ()) -> Outcome:
    """The same network on every framework: describe's parameter count, canonical layers (name, parameter shapes
    and the layer keys `also`, in order) and forward FLOPs (within 1%)."""
    first, *others = model.frameworks
    gaps = []
    for other in others:
        a, b = described[first], described[other]
        if a["parameters"] != b["parameters"]:
            gaps.append(f"{other} has {b['parameters']:,} parameters, {first} {a['parameters']:,}")
        layers = [[(x["name"], x["params"], *(x.get(k) for k in also)) for x in d["layers"]] for d in (a, b)]
        if layers[0] != layers[1]:
            gaps.append(f"{other}'s canonical layers differ from {first}'s")
        fa, fb = a["flops_per_sample"]["forward"], b["flops_per_sample"]["forward"]
        if abs(fa - fb) > 0.01 * max(fa, fb):
            gaps.append(f"{other}'s forward FLOPs {fb:,} against {first}'s {fa:,} (over 1%)")
    return _outcome(
        "same network", "all", gaps, f"{', '.join(model.frameworks)}: the same parameters, layers and FLOPs"
    )


def flops_outcomes(model: catalog.Model, described: Described, parity: ModuleType | None) -> list[Outcome]:
    """Each framework's forward FLOPs against parity.py's forward_flops(hp) (training three times forward)."""
    if parity is None or not hasattr(parity, "forward_flops"):
        why = "the model's parity.py has no forward_flops(hp): the FLOPs are compared between frameworks only"
        return [{"check": "FLOPs", "framework": "all", "status": "skipped", "detail": why}]
    expected, rel = int(parity.forward_flops(model.hp("smoke"))), float(getattr(parity, "FLOPS_REL", 0.01))
    out = []
    for framework, d in described.items():
        flops, gaps = d["flops_per_sample"], []
        if abs(flops["forward"] - expected) > rel * expected:
            gaps.append(f"forward {flops['forward']:,} FLOPs, parity.py expects {expected:,} (within {rel:g})")
        if flops["training"] != 3 * flops["forward"]:
            gaps.append(f"training {flops['training']:,} FLOPs is not 3 x forward")
        out.append(_outcome("FLOPs", framework, gaps, f"forward {flops['forward']:,} as parity.py expects"))
    return out


def listed_state(model: catalog.Model) -> dict[str, int] | None:
    """Each framework's non-trainable state on the smoke preset as workload.toml's [[framework_difference]] lists
    it (smoke_state_values); None where it lists none."""
    differences = tomllib.loads((model.folder / "workload.toml").read_text()).get("framework_difference", [])
    listed = [d["smoke_state_values"] for d in differences if "smoke_state_values" in d]
    return dict(listed[0]) if listed else None


def state_outcomes(model: catalog.Model, described: Described) -> list[Outcome]:
    """Each framework's non-trainable state (batch-norm statistics, fixed tables) as workload.toml lists it, or,
    where it lists none, the same on every framework."""
    listed = listed_state(model)
    first = described[model.frameworks[0]]["framework_state"]["non_trainable_state"]
    out = []
    for framework, d in described.items():
        state = d["framework_state"]["non_trainable_state"]
        if listed is None:
            gaps = [] if state == first else [f"{state:,} non-trainable values, {model.frameworks[0]} {first:,}, and "
                                              "workload.toml's smoke_state_values lists no difference"]  # fmt: skip
        else:
            gaps = (
                []
                if state == listed.get(framework)
                else [
                    f"{state:,} non-trainable values, workload.toml's smoke_state_values says {listed.get(framework)}"
                ]
            )
        out.append(_outcome("framework state", framework, gaps, f"{state:,} non-trainable values, as listed"))
    return out


def own_outcome(model: catalog.Model, described: Described, parity: ModuleType | None) -> Outcome:
    if parity is None or not hasattr(parity, "network_gaps"):
        return {"check": "network", "framework": "all", "status": "skipped",
                "detail": "the model's parity.py has no network_gaps(described, hp)"}  # fmt: skip
    gaps = [str(g) for g in parity.network_gaps(described, model.hp("smoke"))]
    return _outcome("network", "all", gaps, "the layers parity.py expects")


def _within(ours: np.ndarray, theirs: np.ndarray, tol: check_settings.Tolerance) -> str | None:
    if ours.shape != theirs.shape:
        if ours.size != 1 or theirs.size != 1:  # one number may be a scalar in one framework, (1,) in another
            return f"shape {ours.shape} against {theirs.shape}"
        ours = ours.reshape(theirs.shape)
    largest = float(np.abs(theirs).max()) if theirs.size else 0.0
    scale = {"one": 1.0, "largest": largest, "largest_or_1": max(largest, 1.0)}[tol.scale]
    off = np.abs(ours.astype(np.float64) - theirs) - (tol.atol * scale + tol.rtol * np.abs(theirs))
    if not np.isfinite(ours).all() or (off > 0).any():
        worst = float(np.nanmax(np.abs(ours.astype(np.float64) - theirs))) if np.isfinite(ours).any() else np.nan
        return f"{int((off > 0).sum() + (~np.isfinite(ours)).sum())} values off (by up to {worst:.3g})"
    return None


def compare_outputs(theirs: Any, ours: Any, outputs: check_settings.Outputs) -> list[str]:
    """Gaps between two saved .npz files (the first framework's, and one that loaded its weights): every weight
    read back unchanged, each compared output within its tolerance (log_probs over each row's own length, where
    lengths are saved beside them), the `finite` ones finite."""
    gaps = []
    weights = [k for k in theirs.files if "/" in k]
    if weights != [k for k in ours.files if "/" in k]:
        gaps.append("its canonical weights are not the same arrays as the first framework's")
    gaps += [f"{k} did not read back unchanged" for k in weights if k in ours.files
             and not np.array_equal(ours[k], theirs[k])]  # fmt: skip
    names = {k for k in theirs.files if "/" not in k}
    mine = {k for k in ours.files if "/" not in k}
    if check_settings.EVERY_OUTPUT in outputs.compare and names != mine:
        gaps.append(f"outputs {sorted(mine)} against {sorted(names)}")
    for key, tol in outputs.compare.items():
        for name in sorted(names & mine) if key == check_settings.EVERY_OUTPUT else [key]:
            if name not in names or name not in mine:
                gaps.append(f"no output {name} to compare")
            elif name == "log_probs" and "lengths" in names:
                if ours["lengths"].tolist() != theirs["lengths"].tolist():
                    gaps.append("lengths differ")
                    continue
                for i, n in enumerate(theirs["lengths"]):
                    got = _within(ours["log_probs"][i, :n], theirs["log_probs"][i, :n], tol)
                    gaps += [f"log_probs of sequence {i}: {got}"] if got else []
            else:
                got = _within(np.asarray(ours[name]), np.asarray(theirs[name]), tol)
                gaps += [f"{name}: {got} (atol {tol.atol:g}, rtol {tol.rtol:g}, scale {tol.scale})"] if got else []
    for pattern in outputs.finite:
        gaps += [f"{k} is not finite" for k in sorted(mine) if fnmatch.fnmatch(k, pattern)
                 and not np.isfinite(ours[k]).all()]  # fmt: skip
    return gaps


def output_outcomes(model: catalog.Model, described: Described) -> list[Outcome]:
    first, *others = model.frameworks
    out = []
    with np.load(described[first]["npz"]) as theirs:
        for framework in others:
            outputs = check_settings.outputs_of(model, framework)
            with np.load(described[framework]["npz"]) as ours:
                gaps = compare_outputs(theirs, ours, outputs)
            said = ", ".join(outputs.compare) or "no output"
            passed = f"{first}'s weights read back unchanged; {said} compared" + (
                f"; {', '.join(outputs.finite)} finite" if outputs.finite else ""
            )
            out.append(_outcome("same outputs", framework, gaps, passed))
    return out


def check(model: catalog.Model, servers: DescribeServers | None = None) -> list[Outcome]:
    """Every check across the model's frameworks (a model with several); `servers`: describe servers to reuse
    (a caller checking several models), else a server per framework for this model alone."""
    parity = parity_module(model)
    shared = contextlib.nullcontext(servers) if servers is not None else DescribeServers()
    with tempfile.TemporaryDirectory(prefix="tbdkit-parity-") as folder, shared as using:
        try:
            described = describe_with_weights(model, Path(folder), using)
        except UserError as exc:  # a stack not installed here, or a describe that failed: said in one sentence
            return [{"check": "same network", "framework": "all", "status": "failed", "detail": str(exc)}]
        return [network_parity(model, described, tuple(getattr(parity, "SAME_LAYER_KEYS", ()))),
                *flops_outcomes(model, described, parity), *state_outcomes(model, described),
                own_outcome(model, described, parity), *output_outcomes(model, described)]  # fmt: skip
