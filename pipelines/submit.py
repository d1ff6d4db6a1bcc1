"""Upload a spec's pipeline to a KFP API server and start a run (`kfp.Client`)."""

import contextlib
import io
import tempfile
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from pflpipe.errors import PflpipeError
from pflpipe.pipelines.compile import compile_pipeline


class SubmitError(PflpipeError):
    """The KFP API server refused a request or could not be reached."""


@dataclass(frozen=True)
class Submitted:
    """The uploaded pipeline (version) and the started run."""

    pipeline_id: str
    version_id: str | None      # None: the pipeline was new, its first version runs
    experiment_id: str
    run_id: str
    url: str


def submit(spec, *, host: str, experiment: str, arguments: dict[str, str],
           namespace: str | None = None, run_name: str | None = None) -> Submitted:
    """Compile, upload (a new pipeline, or a new version of the spec's pipeline) and run.

    The pipeline is named after `experiment.name`; `experiment` is the KFP experiment.
    """
    name = spec.experiment.name
    stamp = f"{datetime.now():%Y%m%d-%H%M%S}"
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        path = compile_pipeline(spec, Path(tmp) / f"{name}.yaml")
        try:
            client = _client(host, namespace)
            pipeline_id = client.get_pipeline_id(name)
            version_id = None
            if pipeline_id is None:
                pipeline_id = client.upload_pipeline(str(path), pipeline_name=name,
                                                     namespace=namespace).pipeline_id
            else:
                version_id = client.upload_pipeline_version(
                    str(path), pipeline_version_name=f"{name}-{stamp}",
                    pipeline_id=pipeline_id).pipeline_version_id
            exp = client.create_experiment(experiment, namespace=namespace)
            run = client.run_pipeline(exp.experiment_id, run_name or f"{name}-{stamp}",
                                      pipeline_id=pipeline_id, version_id=version_id,
                                      params=arguments)
        except Exception as err:  # noqa: BLE001 - kfp_server_api, urllib3 and ValueError alike
            raise SubmitError(f"the KFP API server at {host} failed the request: "
                              f"{_reason(err)}") from err
    url = f"{host.rstrip('/')}/#/runs/details/{run.run_id}"
    return Submitted(pipeline_id, version_id, exp.experiment_id, run.run_id, url)


def _client(host: str, namespace: str | None):
    import kfp

    return kfp.Client(host=host, namespace=namespace or "kubeflow")


@contextlib.contextmanager
def _quiet():
    """kfp.Client prints a link per call and warns about its server version; we report once."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _reason(err: Exception) -> str:
    status, reason = getattr(err, "status", None), getattr(err, "reason", None)
    body = getattr(err, "body", None)
    if status:
        detail = f": {body.strip()[:300]}" if isinstance(body, str) and body.strip() else ""
        return f"HTTP {status} {reason or ''}".rstrip() + detail
    return f"{err.__class__.__name__}: {err}"
