"""The Kubeflow Trainer job that runs a sharded stage's workers on a cluster (docs/cluster.md).

One TrainJob (trainer.kubeflow.org/v1alpha1) on the ``torch-distributed`` runtime: `engine.workers`
nodes of one process each, every node running ``torchrun --module pflpipe.engine.distributed
TASK`` (torchrun reads the runtime's PET_* variables and gives the worker RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT, as the local launcher does). TASK is an ``s3://`` prefix in the
spec's store (`pflpipe.engine.distributed.task_store`): the workers read the task and the files it
carries (the partition, a warm-start checkpoint) there and rank 0 writes the result there, since
the pods share no folder with the component that launches them.
Per-worker resources (CPU, memory, GPUs) are the stage's in the spec's `resources` section; the
store's endpoint and region, and its S3 secret when the storage names one, become the workers'
environment (a task URI holds neither endpoint nor credentials).
"""

from pflpipe.pipelines.platform import RESOURCE_STAGE, S3_SECRET_ENV
from pflpipe.spec import Spec
from pflpipe.storage import ENDPOINT_ENV

#: The Trainer API version and the runtime the job refers to.
API_VERSION, RUNTIME = "trainer.kubeflow.org/v1alpha1", "torch-distributed"


def train_job(spec: Spec, stage: str, name: str, task_uri: str) -> dict:
    """The TrainJob of `stage`'s workers, as a dict (dump it as YAML or submit it as is).

    Args:
        spec: the validated spec (`engine.workers`, `resources`, `storage`).
        stage: the sharded stage (`warm_start_fedavg`, `personalize` or `train_local`).
        name: the job's name (a DNS-1035 label, unique in its namespace).
        task_uri: where the launching component wrote the workers' task (``s3://bucket/prefix``
            in the spec's store).
    """
    if spec.storage.kind != "s3":
        raise ValueError(f"storage.kind is {spec.storage.kind!r}: a Trainer job's workers run in "
                         "pods of their own and exchange the task and result through S3 storage "
                         "(storage.kind: s3)")
    if not task_uri.startswith(f"s3://{spec.storage.bucket}/"):
        raise ValueError(f"the task URI {task_uri!r} is not in the spec's bucket "
                         f"s3://{spec.storage.bucket}/, where the workers can read it")
    res = spec.resources.for_stage(RESOURCE_STAGE.get(stage, stage))
    requests = {key: value for key, value in (("cpu", res.cpu), ("memory", res.memory)) if value}
    limits = {key: value for key, value in (("cpu", res.cpu_limit), ("memory", res.memory_limit))
              if value}
    if res.gpus:
        limits[res.gpu_type] = str(res.gpus)
    storage, secret = spec.storage, spec.storage.secret_name
    env = [{"name": name, "value": value} for name, value in (
        (ENDPOINT_ENV[0], storage.endpoint_url), ("AWS_DEFAULT_REGION", storage.region)) if value]
    env += [{"name": variable, "valueFrom": {"secretKeyRef": {
        "name": secret, "key": getattr(storage.secret_keys, field)}}}
        for field, variable in S3_SECRET_ENV.items()] if secret else []
    trainer = {
        "image": res.image,
        "command": ["torchrun", "--module", "pflpipe.engine.distributed", task_uri],
        "numNodes": spec.engine.workers,
        "numProcPerNode": 1,
        "resourcesPerNode": {key: value for key, value in
                             (("requests", requests), ("limits", limits)) if value},
        **({"env": env} if env else {}),
    }
    return {"apiVersion": API_VERSION, "kind": "TrainJob",
            "metadata": {"name": name, "labels": {"pflpipe/stage": stage,
                                                  "pflpipe/experiment": spec.experiment.name}},
            "spec": {"runtimeRef": {"name": RUNTIME}, "trainer": trainer}}
