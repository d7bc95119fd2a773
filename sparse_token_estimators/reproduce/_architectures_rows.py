"""The rows of the architectures experiment's section, as its report and its figures read
them (``_architectures`` and ``_architectures_plots``): which models, in which order and
layout, and the width a critical row found."""

from ..architectures import CELLS, ENCODER_ENCODINGS
from ._models import MODELS, QUERY_MODELS

#: the models whose smallest width is searched in the indicator layout
SEARCHED = ("encoder_none", "gru", "lstm", "mamba")
#: the models scored per length, in the order of the table (indicator layout)
LENGTH_MODELS = (*(f"encoder_{e}" for e in ENCODER_ENCODINGS), *CELLS, "mamba")
#: the models of the query layout scored per length (all but the FCN, fixed at T + q)
QUERY_LENGTH_MODELS = tuple(f"query_{m}" for m in QUERY_MODELS if m != "fcn")
#: the layouts, in the order of the summary's tables and the panels
LAYOUTS = ("indicator", "query")


def layout(model):
    """The layout of a model of the catalogue."""
    return MODELS[model].layout


def in_layout(rows, lay):
    """The rows of a layout (rows of results from before the query layout: the indicator's)."""
    return [r for r in rows if r.get("layout", "indicator") == lay]


ORDER = (*SEARCHED, *(f"query_{m}" for m in QUERY_MODELS))


def order(row):
    return ORDER.index(row["model"]), row["seq_len"]


def present(section, lay=None):
    seen = {r["model"] for r in section["lengths_summary"]}
    return [m for m in (*LENGTH_MODELS, *QUERY_LENGTH_MODELS) if m in seen
            and (lay is None or layout(m) == lay)]


def width(row):
    """The width a critical row found, as compared (d + pe_dim for the paper's model)."""
    return row.get("width_offset", 0) + row["star"] if row["star"] else None


def widest(row):
    """The widest width a critical row's search fitted, as compared."""
    return row.get("width_offset", 0) + max(row["evaluated"])


def what(model):
    return MODELS[model].name.split(" (")[0].replace("transformer encoder, ", "encoder, ")
