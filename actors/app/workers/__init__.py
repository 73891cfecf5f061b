"""``llmrt serve --workers N``: the supervisor, the workers' shared figures and their sum.

`supervise` runs N gateway processes on one port (``_supervisor``); each
worker (``llmrt.actors.app.worker``) publishes its statistics to the
supervisor's figures directory and renders ``/metrics`` for all of them
(``_figures``); the sum of several snapshots is pure (``_sum``). Only the
application layer uses this package: the runtime and the gateway know
nothing of workers.
"""

from ._figures import SNAPSHOT_SECONDS as SNAPSHOT_SECONDS
from ._figures import SharedFigures as SharedFigures
from ._figures import retire as retire
from ._supervisor import READY_LINE as READY_LINE
from ._supervisor import WorkerSpec as WorkerSpec
from ._supervisor import supervise as supervise

__all__ = ["READY_LINE", "SNAPSHOT_SECONDS", "SharedFigures", "WorkerSpec", "retire", "supervise"]
