"""Launch text for data-parallel jobs beyond this machine, rendered from a RunSpec by Jinja2:
a torchrun script per node, a Slurm batch script (containers through pyxis/enroot), Kubernetes
manifests (an Indexed Job behind a headless Service) and a compose file of one container per
node. `tbdkit render` writes them, with the spec.json they read, for inspection and submission."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import jinja2

from tbdkit import images
from tbdkit.spec import RunSpec

TARGETS = {"torchrun": "torchrun.sh", "slurm": "job.sbatch", "k8s": "job.yaml", "compose": "compose.yaml"}
TEMPLATES = {"torchrun": "torchrun.sh.j2", "slurm": "slurm.sbatch.j2", "k8s": "k8s.yaml.j2", "compose": "compose.yaml.j2"}


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("tbdkit", "templates/cluster"),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def job_name(spec: RunSpec) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{spec.model}-{spec.framework}-b{spec.batch_size}-{spec.nodes}x{spec.gpus_per_node}"


def render(spec: RunSpec, target: str, *, image: str | None = None, results: str = "results",
           python: str = "python", run_id: str | None = None) -> str:
    run_id = run_id or job_name(spec)
    name = ("tbdkit-" + run_id.lower().replace("_", "-"))[:52].rstrip("-")  # a DNS-1035 label, room for "-spec"
    values = {
        "spec": spec, "run_id": run_id, "name": name, "results": results, "python": python,
        "image": image or images.image_ref(spec.framework), "pvc": "tbdkit-results",
        "spec_json": json.dumps(spec.model_dump(), indent=2), "cpus_per_task": 8 * spec.gpus_per_node,
        "time_limit": "01:00:00",
    }
    return _env().get_template(TEMPLATES[target]).render(**values)


def write(spec: RunSpec, target: str, out_dir: Path, **kwargs: object) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "spec.json").write_text(json.dumps(spec.model_dump(), indent=2) + "\n")
    path = out_dir / TARGETS[target]
    path.write_text(render(spec, target, **kwargs))  # type: ignore[arg-type]
    if target in ("torchrun", "slurm"):
        path.chmod(0o755)
    return path
