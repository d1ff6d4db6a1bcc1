"""FedRep (Collins et al., ICML 2021): a shared representation, a head per client.

Each round a client first trains its own head for `head_epochs` with the received base frozen,
then the base for the local epochs with its new head frozen; only the base is averaged. The
personalized model is the global base with the client's head.
"""

from pflpipe.algorithms.algorithm import Algorithm, Phase, register
from pflpipe.spec.algorithms.fedrep_params import FedRepParams


@register
class FedRep(Algorithm[FedRepParams]):
    """FedPer whose local round alternates: the head alone, then the base alone."""

    kept = ("head",)
    has_global_model = False   # the global head is never trained (never sent): no GA

    def init_kept(self, global_params):
        """Every client's head starts from the initial model's."""
        return {"head": {k: v for k, v in global_params.items() if k in self.head}}

    def is_payload(self, key):
        """Only base keys are sent; the head stays with the client."""
        return key not in self.head

    def phases(self):
        """The head's epochs (base frozen), then the base's (head frozen)."""
        return (Phase(train=("head",), objective=self.joint_objective,
                      epochs=self.params.head_epochs),
                Phase(objective=self.joint_objective))

    def joint_objective(self, state, batch, shared, hp, ctx):
        """The task loss of the base with the client's head."""
        return ctx.task_loss({**state["model"], **state["head"]}, batch)

    def personalized(self, state, shared):
        """The global base with the client's head."""
        return {**self.receive(shared["global"], state)["model"], **state["head"]}
