"""Write the saved models of tests/test_saved_models.py (run once, with the code that saves).

Each estimator (and the paper's transformer in the query layout) is fitted briefly,
seeded, and saved with ``save_params`` (torch format, and safetensors for one), beside
the inputs and the predictions it made; the test loads them with the current code and
asserts bit-identical predictions. Written by commit ffa7587 (before the estimator
layer became ``sparse_token_estimators/estimators/``):

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python tests/data/saved_models/make.py
"""

import json
import os

import numpy as np
import torch

from sparse_token_estimators import (
    SparseTokenEncoder,
    SparseTokenFCN,
    SparseTokenRNN,
    SparseTokenTransformer,
    make_sparse_selection,
)

HERE = os.path.dirname(os.path.abspath(__file__))

#: name -> (class, constructor parameters, layout of the data, safetensors)
MODELS = {
    "transformer": (SparseTokenTransformer, dict(pe_dim=16), "indicator", False),
    "transformer_query": (SparseTokenTransformer, dict(pe_dim=16, layout="query"),
                          "query", True),
    "transformer_fixed": (SparseTokenTransformer,
                          dict(pe_dim=16, positional_encoding="fixed", max_seq_len=12),
                          "indicator", False),
    "fcn": (SparseTokenFCN, dict(hidden_width=16), "indicator", False),
    "encoder": (SparseTokenEncoder, dict(d_model=8, positional_encoding="stochastic"),
                "indicator", True),
    "rnn": (SparseTokenRNN, dict(cell="lstm", hidden_size=8), "indicator", False),
}


def main():
    torch.set_num_threads(1)
    manifest = {}
    for name, (cls, params, layout, safetensors) in MODELS.items():
        X, y = make_sparse_selection(300, seq_len=8, token_dim=3, n_selected=2,
                                     layout=layout, random_state=0)
        X_test, _ = make_sparse_selection(20, seq_len=8, token_dim=3, n_selected=2,
                                          layout=layout, random_state=1)
        est = cls(**params, max_epochs=2, batch_size=64, random_state=0, device="cpu")
        est.fit(X, y)
        suffix = "safetensors" if safetensors else "pt"
        est.save_params(f_params=os.path.join(HERE, f"{name}.{suffix}"),
                        use_safetensors=safetensors)
        np.save(os.path.join(HERE, f"{name}_X.npy"), X_test)
        np.save(os.path.join(HERE, f"{name}_pred.npy"), est.predict(X_test))
        sizes = {"token_dim": 3, **({"seq_len": 8} if cls is SparseTokenFCN else {}),
                 **({"n_selected": 2} if layout == "query" else {})}
        manifest[name] = {"class": cls.__name__, "params": {**params, **sizes},
                          "file": f"{name}.{suffix}", "safetensors": safetensors}
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
