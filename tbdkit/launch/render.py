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

import jinja2
import yaml

from tbdkit.core.errors import UserError
from tbdkit.env import images
from tbdkit.env.oci import validate_image_reference
from tbdkit.launch.node import PORT as NODE_PORT
from tbdkit.results import files as runfiles
from tbdkit.spec.run_spec import RunSpec

TARGETS = {"torchrun": "torchrun.sh", "slurm": "job.sbatch", "k8s": "job.yaml", "compose": "compose.yaml"}
TEMPLATES = {
    "torchrun": "torchrun.sh.j2",
    "slurm": "slurm.sbatch.j2",
    "k8s": "k8s.yaml.j2",
    "compose": "compose.yaml.j2",
}
# A job name is a file name, a Slurm job name and (lowercased) part of a Kubernetes name.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def yaml_scalar(value: object) -> str:
    """`value` as one YAML scalar on one line: double-quoted, every special character escaped."""
    text = yaml.safe_dump(value, default_style='"', width=float("inf"), allow_unicode=False)
    return text.removesuffix("\n...\n").rstrip("\n")


def compose_literal(value: str) -> str:
    """`value` as compose reads it literally: `$` would start a variable interpolation."""
    return value.replace("$", "$$")


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tbdkit.launch", "templates/cluster"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters.update(sh=lambda v: shlex.quote(str(v)), yaml=yaml_scalar, compose=compose_literal)
    return env


def job_name(spec: RunSpec) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{spec.model}-{spec.framework}-b{spec.batch_size}-{spec.nodes}x{spec.gpus_per_node}"


def render(
    spec: RunSpec,
    target: str,
    *,
    image: str | None = None,
    results: str = "results",
    python: str = "python",
    run_id: str | None = None,
) -> str:
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
        "python": python,
        "image": image,
        "pvc": "tbdkit-results",
        # json.dumps escapes every control and non-ASCII character: each line of it is safe in a YAML block
        "spec_json": json.dumps(spec.model_dump(), indent=2),
        "cpus_per_task": 8 * spec.gpus_per_node,
        "time_limit": "01:00:00",
        # TensorFlow and MXNet jobs: the workers' control-channel key, fresh for each rendered file
        "control_key": secrets.token_hex(16),
        "port": NODE_PORT,
    }
    return _env().get_template(TEMPLATES[target]).render(**values)


def write(spec: RunSpec, target: str, out_dir: Path, **kwargs: object) -> Path:
    text = render(spec, target, **kwargs)  # type: ignore[arg-type]  # checked before anything is written
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / runfiles.SPEC).write_text(json.dumps(spec.model_dump(), indent=2) + "\n")
    path = out_dir / TARGETS[target]
    path.write_text(text)
    if target in ("torchrun", "slurm"):
        path.chmod(0o755)
    return path
