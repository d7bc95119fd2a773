"""PyTorch modules for sparse token selection; they know nothing of scikit-learn.

Every ``forward`` takes ``X`` of shape ``(B, T, d + 1)``: tokens followed by
the selection indicator (see ``_layout``), and returns ``(B, d)``.
"""

import torch
from torch import nn

from ._layout import query_as_indicator, split_tokens
from .positional import ENCODINGS, sequence_keys

#: sequences per matrix product when the batch shares its positional draws
_BLOCK = 64
#: positional coordinates (draws x sequences x T x d_p) drawn at once at prediction
_DRAW_BLOCK = 1 << 22


def _names(options):
    return ", ".join(repr(name) for name in options)


class SparseTokenAttention(nn.Module):
    """The one-layer attention model of Wang, Wei, Hsu & Lee (ICML 2024).

    The subset is encoded as the query z = sum_{i in S} p_i; position i scores
    p_i^T W z with one trainable merged key-query matrix W (initialised at
    zero) and the output is sum_i softmax(score)_i x_i, the value map being the
    identity on the token block. W = c I with c -> infinity solves the task.
    The encodings (``positional.ENCODINGS``) differ only in where the p_i come
    from.

    Random encodings consume random input, made by :meth:`draw_noise` and
    passed to ``forward(X, noise=...)``; given no noise, ``forward`` draws it
    itself (from ``generator`` in training). Drawing it outside the module
    keeps a ``torch.compile``-d forward free of random number generators and
    graph breaks; the estimators do so.

    Parameters
    ----------
    token_dim : int
        Token dimension d.
    pe_dim : int
        Positional-encoding dimension d_p; W is d_p x d_p.
    positional_encoding : {"stochastic", "fixed", "sinusoidal", "learned", "randomized"}
        Where the positional vectors come from; see ``positional``.
    max_seq_len : int
        Size of the table of the "fixed", "learned" and "randomized"
        encodings (unused by the others).
    n_pe_draws : int
        The attention is averaged over this many positional draws (random
        encodings: "stochastic", "randomized"), in training and in eval mode;
        averaging lowers the random part of the error. 1 is the paper's
        model. The deterministic encodings ignore it: their draws would all
        be the same. May be changed on a built module.
    output_map : bool
        If True, a trainable linear map (initialised at the identity) follows
        the attention; off in the paper's model.
    eval_seed : int
        Seed of the positional draws in eval mode. Every sequence gets
        ``n_pe_draws`` draws of its own, as in training, derived from
        ``eval_seed`` and the sequence itself (a hash of its float32 values,
        ``positional.sequence_keys``): a prediction depends on its own
        sequence only, on the CPU bit for bit, whatever the batch it is in
        or the thread (the products run on blocks of a fixed size; tested),
        and two different sequences get unrelated draws, so the draws of a
        validation set and of a held-out set are independent. Kept as an
        int64 buffer, so it is part of the ``state_dict``: loaded weights
        predict as the saved module did.
    layout : {"indicator", "query"}
        The layout of ``X`` (see ``_layout``). In the query layout the last
        ``n_selected`` rows name the subset by position, and the model reads
        them through its own positional code: z = sum_j p_{i_j}, the same
        query as the indicator's sum over S (any T: T = rows - n_selected,
        so a longer sequence may name positions up to its own T).
    n_selected : int or None
        The number q of query rows (query layout only).

    Examples
    --------
    >>> import torch
    >>> from sparse_token_estimators import make_sparse_selection
    >>> X, y = make_sparse_selection(8, seq_len=10, token_dim=4, random_state=0)
    >>> module = SparseTokenAttention(token_dim=4, pe_dim=16).eval()
    >>> module(torch.as_tensor(X)).shape
    torch.Size([8, 4])
    >>> X = torch.as_tensor(X)
    >>> noise = module.train().draw_noise(X, generator=torch.Generator().manual_seed(0))
    >>> module(X, noise=noise).shape
    torch.Size([8, 4])
    """

    #: defaults for modules pickled before the query layout
    layout = "indicator"
    n_selected = None

    def __init__(self, token_dim, pe_dim=64, positional_encoding="stochastic",
                 max_seq_len=256, n_pe_draws=1, output_map=False, eval_seed=0,
                 layout="indicator", n_selected=None):
        super().__init__()
        self.layout = layout
        self.n_selected = n_selected
        if positional_encoding not in ENCODINGS:
            raise ValueError(
                f"positional_encoding must be one of {_names(ENCODINGS)}; got "
                f"{positional_encoding!r}."
            )
        self.positions = ENCODINGS[positional_encoding](pe_dim, max_seq_len)
        self.n_pe_draws = n_pe_draws
        self.register_buffer("eval_seed", torch.tensor(eval_seed, dtype=torch.int64))
        self.W = nn.Parameter(torch.zeros(pe_dim, pe_dim))
        self.value = None
        if output_map:
            self.value = nn.Linear(token_dim, token_dim, bias=False)
            nn.init.eye_(self.value.weight)

    def draw_noise(self, X, generator=None):
        """The random input ``forward(X, noise=...)`` consumes in the current mode.

        Parameters
        ----------
        X : Tensor of shape (B, T, d + 1)
            The batch (only its shape and device are read).
        generator : torch.Generator or None
            Source of the training draws (the global generator when None),
            on ``X``'s device. Unused in eval mode.

        Returns
        -------
        noise : Tensor or None
            None for a deterministic encoding. In training, n_pe_draws fresh
            draws for every sequence. In eval mode, one int64 key per
            sequence (shape (B,)), a hash of the sequence and of
            ``eval_seed`` from which ``forward`` derives the sequence's
            n_pe_draws draws block by block (memory O(T d_p) per sequence
            and draw, never the whole batch's). Nothing is kept: the module
            holds no state between predictions, so concurrent calls from
            several threads are safe and a pickled model carries only its
            weights (what a draw costs next to the forward pass:
            ``benchmarks/bench_predict_memory.py``).
        """
        if not self.positions.random:
            return None
        batch_size, seq_len = X.shape[0], self._seq_len(X)
        if self.training:
            return self.positions.draw((self.n_pe_draws, batch_size, seq_len),
                                       generator=generator, device=X.device)
        if self.layout == "query":
            # keyed by the task, not its layout: one sequence in either layout
            # gets the same draws, so the two layouts are one model
            tokens, indicator = query_as_indicator(X, self.n_selected)
            X = torch.cat([tokens, indicator.unsqueeze(-1)], dim=-1)  # (B, T, d + 1)
        return sequence_keys(X, int(self.eval_seed))  # (B,)

    def _seq_len(self, X):
        """T, the token rows of ``X`` (all rows but the query's in the query layout)."""
        return X.shape[1] - (self.n_selected if self.layout == "query" else 0)

    def _split(self, X):
        """``(tokens (B, T, d), indicator (B, T))`` of ``X`` in either layout."""
        if self.layout == "query":
            return query_as_indicator(X, self.n_selected)
        return split_tokens(X)

    def _positional_vectors(self, batch_size, seq_len, noise):
        if noise is None:  # a deterministic encoding: one set for every sequence
            return self.positions((1, 1, seq_len))  # (1, 1, T, d_p)
        return self.positions((self.n_pe_draws, batch_size, seq_len), noise)  # (K, B, T, d_p)

    def _eval_positions(self, X, draws=None):
        """The positional vectors every sequence of ``X`` gets in eval mode.

        What ``forward`` uses at prediction (made there block by block); for
        inspection and tests. Holds the whole (K, B, T, d_p): use it on a
        few sequences.

        Parameters
        ----------
        X : Tensor of shape (B, T, d + 1)
        draws : range or None
            Which of the n_pe_draws draws; None: all.

        Returns
        -------
        P : Tensor of shape (K, B, T, d_p)
            For a deterministic encoding the one set, broadcast (K = 1).
        """
        if not self.positions.random:
            return self.positions((1, 1, X.shape[1])).expand(1, len(X), -1, -1)
        draws = range(self.n_pe_draws) if draws is None else draws
        keys = sequence_keys(X, int(self.eval_seed))
        return self.positions.keyed_vectors(keys, draws, X.shape[1])

    def _attend(self, P, indicator):
        # P: (K or 1, B or 1, T, d_p) positional draws; indicator: (B, T)
        if P.shape[1] == 1 and not self.training:
            return self._attend_shared(P[:, 0], indicator)
        z = torch.matmul(indicator.unsqueeze(1), P)  # (K, B, 1, d_p): z = sum_{i in S} p_i
        Wz = z @ self.W.T  # (K, B, 1, d_p); W z first: never a (T, d_p, d_p) product
        scores = (P @ Wz.transpose(-1, -2)).squeeze(-1)  # (K, B, T): p_i^T W z
        return torch.softmax(scores, dim=-1).mean(0)  # (B, T)

    def _attend_keyed(self, keys, indicator):
        # Eval mode, a random encoding: every sequence's own draws, made from
        # its key by blocks of C sequences and G draws, C G T d_p <=
        # _DRAW_BLOCK, so memory does not grow with the batch. C and G depend
        # on (K, T, d_p) only, and the last block is padded, so that every
        # product has the same shape whatever the batch: matrix kernels round
        # differently at different shapes, and a prediction must not depend
        # on its batch.
        batch_size, seq_len = indicator.shape
        n_draws, per_draw = self.n_pe_draws, seq_len * self.W.shape[0]
        block = max(1, min(_BLOCK, _DRAW_BLOCK // (n_draws * per_draw)))
        group = n_draws if block * n_draws * per_draw <= _DRAW_BLOCK else max(
            1, min(n_draws, _DRAW_BLOCK // per_draw))
        pad = -batch_size % block
        pe_dim = self.W.shape[0]
        pad_dim = -pe_dim % 16
        W_padded = nn.functional.pad(self.W.T, (0, pad_dim, 0, pad_dim))  # (d_p', d_p')
        keys = nn.functional.pad(keys, (0, pad))  # (B + pad,)
        indicator = nn.functional.pad(indicator, (0, 0, 0, pad))  # (B + pad, T)
        rows = []
        for key, s in zip(keys.split(block), indicator.split(block)):  # (C,), (C, T)
            total = 0
            for start in range(0, n_draws, group):
                draws = range(start, min(start + group, n_draws))
                P = self.positions.keyed_vectors(key, draws, seq_len).to(s.dtype)  # (G, C, T, d_p)
                # Products by sequence as sums of elementwise products, not
                # batched matrix-vector products: a matrix kernel's rounding
                # may depend on where a sequence's vectors sit in memory
                # (their alignment), and so on its place in the block.
                z = (s.unsqueeze(-1) * P).sum(-2)  # (G, C, d_p): sum_{i in S} p_i
                # W z first: never a (T, d_p, d_p) product. One matrix product
                # for the block, with d_p padded to a multiple of 16: at
                # smaller sizes the CPU kernel rounds a row differently by
                # its place in the block.
                Wz = (nn.functional.pad(z, (0, pad_dim)) @ W_padded)[..., :pe_dim]  # (G, C, d_p)
                scores = (P * Wz.unsqueeze(-2)).sum(-1)  # (G, C, T): p_i^T W z
                total = total + torch.softmax(scores, dim=-1).sum(0)  # (C, T)
            rows.append(total / n_draws)
        return torch.cat(rows)[:batch_size]  # (B, T)

    def _attend_shared(self, P, indicator):
        # The same positions for the whole batch (a deterministic encoding in
        # eval mode; formerly also the random ones' K draws): matrix products
        # over blocks of _BLOCK sequences instead of broadcasting P to
        # (K, B, T, d_p), so memory is O(K T (d_p + _BLOCK)), not O(K B T d_p).
        # Every product has the same shape whatever the batch (the last
        # block is padded with empty rows): matrix kernels round differently
        # at different shapes, and a prediction must not depend on its batch.
        n_draws, seq_len, pe_dim = P.shape  # P: (K, T, d_p)
        flat = P.transpose(0, 1).reshape(seq_len, n_draws * pe_dim)  # (T, K d_p)
        batch_size = indicator.shape[0]
        padded = nn.functional.pad(indicator, (0, 0, 0, -batch_size % _BLOCK))
        rows = []
        for block in padded.split(_BLOCK):  # (C, T), C = _BLOCK
            z = (block @ flat).view(_BLOCK, n_draws, pe_dim)  # (C, K, d_p): sum_{i in S} p_i
            Wz = z @ self.W.T  # (C, K, d_p); W z first: never a (T, d_p, d_p) product
            scores = P @ Wz.permute(1, 2, 0)  # (K, T, d_p) @ (K, d_p, C) -> (K, T, C)
            rows.append(torch.softmax(scores, dim=1).mean(0).T)  # (C, T)
        return torch.cat(rows)[:batch_size]  # (B, T)

    def attention(self, X, noise=None, generator=None):
        """Attention weights of shape (B, T); each row sums to 1.

        ``noise`` and ``generator`` as in ``forward``.
        """
        _, indicator = self._split(X)  # (B, T)
        if noise is None:
            noise = self.draw_noise(X, generator=generator)
        if noise is not None and not self.training:  # keys: every sequence's own draws
            return self._attend_keyed(noise, indicator)
        P = self._positional_vectors(*indicator.shape, noise)  # (K or 1, B or 1, T, d_p)
        return self._attend(P, indicator)

    def forward(self, X, noise=None, generator=None):
        """Predict from ``X`` of shape (B, T, d + 1); returns (B, d).

        ``noise``: what :meth:`draw_noise` returned for this batch in this
        mode; when None, it is drawn here, from ``generator`` in training.
        """
        tokens, _ = self._split(X)  # (B, T, d)
        attn = self.attention(X, noise=noise, generator=generator)  # (B, T)
        out = torch.matmul(attn.unsqueeze(1), tokens).squeeze(1)  # (B, d)
        return out if self.value is None else self.value(out)


class FullyConnectedNet(nn.Module):
    """A ReLU network on the flattened (T * (d + 1)) input, tokens and indicator.

    It has no notion of position or length: it accepts only ``seq_len``.

    Parameters
    ----------
    seq_len : int
        Sequence length T the net is built for.
    token_dim : int
        Token dimension d.
    hidden_width : int
        Width m of every hidden layer.
    n_hidden_layers : int
        Number of hidden layers (at least 1).

    Examples
    --------
    >>> import torch
    >>> net = FullyConnectedNet(seq_len=10, token_dim=4, hidden_width=32)
    >>> net(torch.zeros(8, 10, 5)).shape
    torch.Size([8, 4])
    """

    def __init__(self, seq_len, token_dim, hidden_width=256, n_hidden_layers=1):
        super().__init__()
        self.seq_len = seq_len
        widths = [seq_len * (token_dim + 1)] + [hidden_width] * n_hidden_layers
        layers = [nn.Flatten()]
        for fan_in, fan_out in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], token_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, X):
        if X.shape[1] != self.seq_len:
            raise ValueError(
                f"FullyConnectedNet was built for seq_len={self.seq_len}; got "
                f"sequences of length {X.shape[1]}."
            )
        return self.net(X)  # (B, T, d + 1) -> (B, T * (d + 1)) -> (B, d)
