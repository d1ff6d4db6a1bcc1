"""Per-stage settings of a task: image, resources, scheduling, secrets and caching.

Everything comes from the spec's `resources` section (`Resources.for_stage`). kfp.local ignores
the Kubernetes settings (it warns; `pflpipe run` silences those warnings).
"""

from kfp import kubernetes

from pflpipe.pipelines.cache import CACHED

#: The resources a stage without a section of its own in `resources` uses.
RESOURCE_STAGE = {"collect_results": "evaluate_fairness", "merge_shards": "evaluate_fairness",
                  "collect_members": "evaluate_fairness",
                  "tune_point": "personalize", "tune": "evaluate_fairness",
                  "train_members": "personalize"}
#: The variable each credential of an S3 secret is mounted as (what boto3 reads).
S3_SECRET_ENV = {"access_key_id": "AWS_ACCESS_KEY_ID",
                 "secret_access_key": "AWS_SECRET_ACCESS_KEY"}


def configure(task, spec, stage: str):
    """Apply the spec's settings for `stage` to `task`; return the task."""
    res = spec.resources.for_stage(RESOURCE_STAGE.get(stage, stage))
    task.set_container_image(res.image)
    task.set_caching_options(stage in CACHED)
    if res.cpu:
        task.set_cpu_request(res.cpu)
    if res.cpu_limit:
        task.set_cpu_limit(res.cpu_limit)
    if res.memory:
        task.set_memory_request(res.memory)
    if res.memory_limit:
        task.set_memory_limit(res.memory_limit)
    if res.gpus:
        task.set_accelerator_type(res.gpu_type).set_accelerator_limit(res.gpus)
    for key, value in res.node_selector.items():
        kubernetes.add_node_selector(task, key, value)
    for toleration in res.tolerations:
        kubernetes.add_toleration(task, key=toleration.key, operator=toleration.operator,
                                  value=toleration.value, effect=toleration.effect)
    secret = getattr(spec.storage, "secret_name", None)
    if secret:
        keys = spec.storage.secret_keys
        kubernetes.use_secret_as_env(task, secret, {getattr(keys, field): variable
                                                    for field, variable in S3_SECRET_ENV.items()})
    return task
