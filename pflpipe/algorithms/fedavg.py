"""FedAvg (McMahan et al., AISTATS 2017): every hook keeps its default.

Clients train the global model on their data for E local epochs; the server averages the results
weighted by n_k / n.
"""

from pflpipe.algorithms.algorithm import Algorithm


class FedAvg(Algorithm):
    """The warm start of every pflpipe experiment, and the global baseline."""
