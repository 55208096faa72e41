"""Federated image classification on the federated layer's aggregators.

``data`` (digits / CIFAR / Fashion-MNIST loaders, Dirichlet and IID splits), ``models``
(plain-torch CNNs and ResNets on one flat parameter vector), ``fisher`` (softmax GGN:
matrix-free products, diagonal, K-FAC, Grams), ``aggregators`` (FedFish, FisherMerge,
FedFisher, RegMean, FedBEns, FIPA with a complement step), ``methods`` (one-shot and
multi-round protocols), ``bench``/``cli`` (``python -m fedsciml bench images``).

Importing this package registers the image methods in the one method registry
(:data:`fedsciml.runtime.driver.METHODS`, kind ``images``; :mod:`fedsciml.images.methods`).
"""
from fedsciml.images import methods as _methods  # noqa: E402,F401  (registers the image methods)
