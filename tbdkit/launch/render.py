"""Launch text for data-parallel jobs beyond this machine, rendered from a RunSpec by Jinja2:
a torchrun script per node, a Slurm batch script (containers through pyxis/enroot), Kubernetes
manifests (an Indexed Job behind a headless Service) and a compose file of one container per
node. `tbdkit render` writes them, with the spec.json they read, for inspection and submission.

Nothing a user passes is pasted raw: the image is checked against the OCI reference grammar
(tbdkit.env.oci) first, every value a shell reads goes through the `sh` filter (shlex.quote), every
value in YAML through the `yaml` filter (PyYAML's double-quoted scalar, one line), and compose's
`$` interpolation is escaped (`compose` filter)."""

from __future__ import annotations

import datetime as dt
import json
import re
import secrets
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from tbdkit.core.errors import UserError
from tbdkit.core.paths import KIT_ROOT
from tbdkit.env import images, stacks
from tbdkit.env.oci import validate_image_reference
from tbdkit.launch.docker import CONTAINER_WORKLOADS_DIR
from tbdkit.launch.roles import NODE_PORT
from tbdkit.results import files as runfiles
from tbdkit.results import outputs
from tbdkit.spec import catalog
from tbdkit.spec.run_spec import RunSpec

if TYPE_CHECKING:  # Jinja2 and PyYAML load when a job is rendered, not with every command that can render one
    import jinja2

TARGETS = {"torchrun": "torchrun.sh", "slurm": "job.sbatch", "k8s": "job.yaml", "compose": "compose.yaml"}
TEMPLATES = {
    "torchrun": "torchrun.sh.j2",
    "slurm": "slurm.sbatch.j2",
    "k8s": "k8s.yaml.j2",
    "compose": "compose.yaml.j2",
}
NATIVE_SLURM = "slurm-native.sbatch.j2"  # the stack's venv from a shared path, no container
# Files a target needs beside its launch file: Kubernetes' results volume, applied once and kept
# across jobs (in the job's own manifest, `kubectl delete -f` would delete the results with it).
EXTRA = {"k8s": {"results-pvc.yaml": "results-pvc.yaml.j2"}}
PVC = "tbdkit-results"
CPUS_PER_GPU = 8  # Slurm's --cpus-per-task and a Kubernetes worker pod's CPU request, per GPU
MEMORY_PER_GPU_GIB = 16  # a Kubernetes worker pod's memory request, per GPU
CPUS_WITHOUT_GPU, MEMORY_WITHOUT_GPU_GIB = 2, 8  # MXNet's scheduler and server pods
PVC_GIB = 20
# A job name is a file name, a Slurm job name and (lowercased) part of a Kubernetes name.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def yaml_scalar(value: object) -> str:
    """`value` as one YAML scalar on one line: double-quoted, every special character escaped."""
    import yaml

    text = yaml.safe_dump(value, default_style='"', width=float("inf"), allow_unicode=False)
    return text.removesuffix("\n...\n").rstrip("\n")


def compose_literal(value: str) -> str:
    """`value` as compose reads it literally: `$` would start a variable interpolation."""
    return value.replace("$", "$$")


def enroot_uri(image: str) -> str:
    """A Docker image reference as enroot and pyxis read one, `[REGISTRY#]IMAGE[:TAG]`: a registry host
    (the first component holding `.` or `:`, or `localhost`) is set off by `#`, never `/` (enroot would
    look for it on Docker Hub)."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


def _env() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tbdkit.launch", "templates/cluster"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters.update(sh=lambda v: shlex.quote(str(v)), yaml=yaml_scalar, compose=compose_literal, enroot=enroot_uri)
    return env


def outside_workload(spec: RunSpec) -> dict[str, str] | None:
    """A model from outside the kit, as a rendered job names it: its folder here (`host`), where a container
    mounts it read-only (`mount`) and the variable the agent reads it from (`env`); None for the kit's own."""
    model = catalog.get(spec.model)
    if model.origin == catalog.KIT:
        return None
    return {
        "host": str(model.folder.resolve()),
        "mount": f"{CONTAINER_WORKLOADS_DIR}/{model.name}",
        "env": catalog.env_of(model),
    }


def job_name(spec: RunSpec) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{spec.model}-{spec.framework}-b{spec.batch_size}-{spec.nodes}x{spec.gpus_per_node}"


def render(
    spec: RunSpec,
    target: str,
    *,
    image: str | None = None,
    results: str = "results",
    python: str | None = None,
    run_id: str | None = None,
    template: str | None = None,
    native: bool = False,
    slurm: dict[str, object] | None = None,
) -> str:
    """TARGET's launch text (or, with `template`, one of the files it needs beside it). `python`: the
    interpreter the torchrun script runs, by default the framework stack's (`tbdkit setup`), as the
    native launcher runs it; $TBDKIT_PYTHON overrides it on a node where the stack lives elsewhere.
    `native`: the Slurm job runs that interpreter from a shared path instead of the image through pyxis;
    `slurm`: its sbatch settings (tbdkit.launch.slurm.SlurmOptions.values)."""
    if target == "torchrun" and spec.framework != "pytorch":
        raise UserError(
            f"The torchrun target is PyTorch's; a {spec.framework} job renders for --target slurm, "
            "k8s or compose (each node runs `python -m tbdkit.launch.node`)."
        )
    image = validate_image_reference(image or images.image_ref(spec.framework))
    run_id = run_id or job_name(spec)
    if not _RUN_ID.fullmatch(run_id):
        raise UserError(
            f"The job name {run_id!r} may hold only letters, digits, '.', '_' and '-' (at most 128): pass another."
        )
    name = ("tbdkit-" + run_id.lower().replace("_", "-").replace(".", "-"))[:52].rstrip(
        "-"
    )  # DNS-1035, room for "-spec"
    values = {
        "spec": spec,
        "run_id": run_id,
        "name": name,
        "results": results,
        "python": python or str(stacks.python_of(spec.framework)),
        "image": image,
        "pvc": PVC,
        "pvc_gib": PVC_GIB,
        "cpus_per_gpu": CPUS_PER_GPU,
        "memory_per_gpu_gib": MEMORY_PER_GPU_GIB,
        "cpus_without_gpu": CPUS_WITHOUT_GPU,
        "memory_without_gpu_gib": MEMORY_WITHOUT_GPU_GIB,
        # json.dumps escapes every control and non-ASCII character: each line of it is safe in a YAML block
        "spec_json": json.dumps(spec.model_dump(), indent=2),
        "cpus_per_task": CPUS_PER_GPU * spec.gpus_per_node,
        "time_limit": "01:00:00",
        "kit": str(KIT_ROOT),
        "gpus": spec.device != "cpu",
        "sbatch_options": [],
        "output": f"{run_id}-%j.log",
        # TensorFlow and MXNet jobs: the workers' control-channel key, fresh for each rendered file
        "control_key": secrets.token_hex(16),
        "port": NODE_PORT,
        "outside": outside_workload(spec),
    }
    values.update(slurm or {})
    chosen = template or (NATIVE_SLURM if native and target == "slurm" else TEMPLATES[target])
    return _env().get_template(chosen).render(**values)


def write(spec: RunSpec, target: str, out_dir: Path, **kwargs: object) -> Path:
    spec = spec.model_copy(update={"rendered_for": target})  # spec.json says what it was written for
    text = render(spec, target, **kwargs)  # type: ignore[arg-type]  # checked before anything is written
    beside = {name: render(spec, target, template=t, **kwargs) for name, t in EXTRA.get(target, {}).items()}  # type: ignore[arg-type]
    with outputs.staged(out_dir, "The launch files") as stage:  # a full disk leaves out_dir as it was
        (stage / runfiles.SPEC).write_text(json.dumps(spec.recorded().model_dump(), indent=2) + "\n")
        for name, extra in beside.items():
            (stage / name).write_text(extra)
        (stage / TARGETS[target]).write_text(text)
        if target in ("torchrun", "slurm"):
            (stage / TARGETS[target]).chmod(0o755)
    return out_dir / TARGETS[target]
