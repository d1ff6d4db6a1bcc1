"""pflpipe: declarative, Kubeflow-native personalized federated learning experiments."""

__version__ = "0.1.0"
