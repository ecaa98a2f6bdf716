"""The matrl judges on Ray Serve: the scaled setup (several GPUs, several trainer nodes).

    rlplugs matrl serve-judges --ray --replicas 4 --gpus_per_replica 1            # local Ray, 4 GPUs
    rlplugs matrl serve-judges --ray --ray_address auto --host 0.0.0.0 --detach    # a running cluster

What Ray Serve adds over the single-node service (:mod:`matrl.service`), which answers the same
HTTP contract through the same :class:`~matrl.service.JudgeReplica`:

- **replicas**: ``num_replicas`` copies of the judges, each on its own GPU (``num_gpus``) or CPUs,
  on any node of the cluster; Serve's proxy (one per node) spreads requests over them;
- **dynamic batching**: ``@serve.batch`` collects concurrent requests on a replica into one batched
  model call (``max_batch_size``, ``batch_wait_timeout_s``);
- **health checks and restarts**: Serve calls :meth:`JudgeDeployment.check_health` every
  ``health_check_period_s``; a replica that fails it, or whose process dies, is replaced. Requests
  it was serving fail at the proxy; the client retries them and they land on a live replica;
- **one address for many trainers**: every trainer node sets ``judge_url`` to the Serve proxy of
  any node (``http://HEAD:8000``); the cluster keeps the app after this command exits
  (``--detach``).

Metrics are Ray Serve metrics (``ray_matrl_judge_*``, tagged with the replica) that Ray's metrics
agent exports in Prometheus' text format on each node, next to Serve's own ``ray_serve_*``
request and latency metrics; ``/metrics`` on the app answers 404 saying so.
"""

from __future__ import annotations

import logging
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from matrl.service import JudgeOptions, JudgeReplica
from rlplugs import ServiceMetrics

log = logging.getLogger(__name__)

APP_NAME = "matrl-judges"


@serve.deployment(name="JudgeDeployment", health_check_period_s=10, health_check_timeout_s=30,
                  graceful_shutdown_timeout_s=5)
class JudgeDeployment:
    """One Serve replica: loads the judges, batches requests, answers the contract."""

    def __init__(self, options: JudgeOptions):
        self.replica = JudgeReplica(ServiceMetrics("matrl_judge", backend="ray"))
        self.batched.set_max_batch_size(options.max_batch_size)
        self.batched.set_batch_wait_timeout_s(options.batch_window_s)
        self.replica.batched = self.batched
        self.replica.load(options.load)
        if self.replica.load_error:  # Serve retries starting the replica and reports the error
            raise RuntimeError(f"judges failed to load: {self.replica.load_error}")

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.02)
    async def batched(self, items: list[tuple[str, list]]) -> list[Any]:
        return await self.replica.run_batch(items)

    async def __call__(self, request: Request) -> Response:
        path, root = request.scope["path"], request.scope.get("root_path", "")
        route = path[len(root):] if root and path.startswith(root) else path
        status, data, headers = await self.replica.handle(request.method, route or "/", await request.body())
        return Response(data, status, headers=headers)

    def check_health(self) -> None:
        if not self.replica.healthy:
            raise RuntimeError(f"judge replica unhealthy: {self.replica.model_failures} model failures in a row")


def deploy(options: JudgeOptions, *, address: str | None = None, replicas: int = 1, gpus_per_replica: float = 0.0,
           cpus_per_replica: float = 1.0, host: str = "127.0.0.1", port: int = 8000, route_prefix: str = "/",
           num_cpus: int | None = None) -> str:
    """Start (``address=None``) or join a Ray cluster, deploy the judges, return the service URL."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, num_cpus=num_cpus if address is None else None, include_dashboard=False,
                 log_to_driver=False)
    serve.start(http_options={"host": host, "port": port})
    app = JudgeDeployment.options(
        num_replicas=replicas,
        ray_actor_options={"num_cpus": cpus_per_replica, "num_gpus": gpus_per_replica},
        # a replica must accept more requests than one batch holds, or batches never fill
        max_ongoing_requests=max(256, 4 * options.max_batch_size),
    ).bind(options)
    serve.run(app, name=APP_NAME, route_prefix=route_prefix)
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    return f"http://{shown}:{port}{route_prefix.rstrip('/')}"


def shutdown() -> None:
    """Remove the app and stop Serve and Ray (what Ctrl-C does without ``--detach``)."""
    import ray

    serve.delete(APP_NAME)
    serve.shutdown()
    ray.shutdown()
