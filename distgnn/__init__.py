"""distgnn: full-batch distributed GNN training on CPU clusters (README.md, docs/design.md).

``distgnn.train_model(partdir, module, ...)`` trains a user's own model (:mod:`distgnn.api`);
importing the package itself loads no torch, so the CLI answers ``--help`` at once."""


def __getattr__(name: str):
    if name == "train_model":
        from distgnn.api import train_model

        return train_model
    raise AttributeError(f"module 'distgnn' has no attribute {name!r}")
