"""More architectures for the task: a standard transformer encoder and recurrent nets.

Torch modules only (they know nothing of scikit-learn), beside the paper's two
in ``modules``. Every ``forward`` takes ``X`` of shape ``(B, T, d + 1)``,
tokens followed by the selection indicator (see ``_layout``), and returns
``(B, d)``.

- :class:`TransformerEncoder`: the transformer people train, written as
  nanoGPT writes its blocks: tokens and indicator projected to ``d_model``,
  ``n_layers`` pre-norm blocks of multi-head softmax self-attention (trainable
  queries, keys, values and output projection) and an MLP, each with a
  residual, then one d-vector per sequence by attention pooling with a
  learned query. Positional encodings: the five of ``positional`` (added to
  the input), ``"rope"`` (rotary, on the queries and keys of every block) and
  ``"none"``.
- :class:`RecurrentNet`: a GRU, LSTM or plain (tanh) RNN reading the sequence
  token by token; the d-vector is a linear map of its last hidden state.

The task is permutation invariant (the target averages the selected tokens
in any order) and the indicator channel names the subset, so neither needs a
position to solve it: attention can select by content, the indicator. Where
the paper's model needs positional vectors to build its query, this encoder
may use none.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from .positional import ENCODINGS, sequence_keys

#: ``positional_encoding`` options of :class:`TransformerEncoder`: the package's
#: five (added to the input), rotary (on queries and keys) and none
ENCODER_ENCODINGS = (*ENCODINGS, "rope", "none")

#: ``cell`` options of :class:`RecurrentNet` and the torch module of each
CELLS = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}


def _names(options):
    return ", ".join(repr(name) for name in options)


def check_encoder_sizes(d_model, n_heads, positional_encoding):
    """Raise ValueError if the encoder's sizes do not fit together.

    The estimators call it before building anything; the module calls it too.

    Examples
    --------
    >>> check_encoder_sizes(32, 4, "rope")
    >>> try:
    ...     check_encoder_sizes(30, 4, "none")
    ... except ValueError as exc:
    ...     print(str(exc)[:43])
    d_model=30 must be a multiple of n_heads=4:
    """
    if d_model % n_heads:
        raise ValueError(
            f"d_model={d_model} must be a multiple of n_heads={n_heads}: each head "
            f"gets d_model / n_heads channels. Use d_model={n_heads * -(-d_model // n_heads)} "
            f"or an n_heads that divides {d_model}."
        )
    if positional_encoding == "rope" and (d_model // n_heads) % 2:
        raise ValueError(
            f"Rotary positions rotate pairs of channels, so d_model / n_heads must be "
            f"even; got d_model={d_model}, n_heads={n_heads} ({d_model // n_heads} per "
            f"head). Use d_model={2 * d_model} or another n_heads."
        )
    if positional_encoding == "sinusoidal" and d_model % 2:
        raise ValueError(
            f"The sinusoidal encoding pairs a sin and a cos per frequency, so d_model "
            f"must be even; got d_model={d_model}. Use d_model={d_model + 1}."
        )


def encoder_width_multiple(n_heads, positional_encoding):
    """The number every ``d_model`` of the encoder must be a multiple of.

    ``n_heads`` (each head gets ``d_model / n_heads`` channels), twice that
    with rotary positions (each head rotates pairs of channels), and the least
    common multiple of ``n_heads`` and 2 with the sinusoidal encoding (a sin
    and a cos per frequency). A width search over ``d_model`` evaluates only
    multiples of it, so that no width it tries is refused by
    :func:`check_encoder_sizes`.

    >>> [encoder_width_multiple(h, pe) for h, pe in
    ...  [(1, "none"), (2, "rope"), (1, "sinusoidal"), (3, "sinusoidal"), (4, "sinusoidal")]]
    [1, 4, 2, 6, 4]
    """
    if positional_encoding == "rope":
        return 2 * n_heads
    if positional_encoding == "sinusoidal":
        return math.lcm(n_heads, 2)
    return n_heads


def input_scale(d_model):
    """The factor of the encoder's positional vectors: sqrt(d_model / 3).

    The expected norm of an embedded token row as ``nn.Linear(d + 1,
    d_model)`` is initialised (weights and bias uniform in +-1/sqrt(d + 1),
    variance 1 / (3 (d + 1)); a row [x_i, 0] with x_i standard Gaussian has
    E||x_i||^2 = d): E||W [x_i; 0] + b||^2 = d_model (d + 1) / (3 (d + 1)) =
    d_model / 3, whatever d. A unit-norm p_i times this factor enters at the
    norm of the token it is added to, as Vaswani et al. (2017) scale their
    embeddings by sqrt(d_model) so that neither drowns the other. (At norm 1
    beside a row of norm sqrt(32 / 3) ~ 3.3, a query row of the query layout
    could not find the token it names: R^2 ~ q / T.)

    Examples
    --------
    >>> round(input_scale(32), 3)
    3.266
    """
    return math.sqrt(d_model / 3)


class Rotary(nn.Module):
    """Rotary position embedding (Su et al., "RoFormer", 2021) of queries and keys.

    Channel pair (2k, 2k + 1) of position t is rotated by the angle
    t / 10000^(2k / head_size), so that q_s . k_t depends on s - t only.
    Defined at every position: any sequence length works.

    Examples
    --------
    >>> import torch
    >>> Rotary(8)(torch.ones(2, 3, 5, 8)).shape
    torch.Size([2, 3, 5, 8])
    """

    def __init__(self, head_size):
        super().__init__()
        inv_freq = 10000.0 ** (-torch.arange(0, head_size, 2).float() / head_size)
        # derived from head_size: a buffer that follows the device, not saved
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, positions=None):
        # positions: (B, T) the position of every row (the query layout gives
        # a query row the position it names); None: row t is at position t
        if positions is None:
            T = x.shape[-2]
            t = torch.arange(T, device=x.device, dtype=self.inv_freq.dtype)
            angles = t[:, None] * self.inv_freq  # (T, hs / 2)
        else:
            angles = positions.to(self.inv_freq.dtype)[:, None, :, None] * self.inv_freq
            # (B, 1, T, hs / 2): broadcast over the heads
        cos, sin = angles.cos(), angles.sin()  # (T or B, 1, T, hs / 2)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, nh, T, hs / 2) each
        rotated = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        return rotated.flatten(-2)  # (B, nh, T, hs)


class SelfAttention(nn.Module):
    """Multi-head softmax self-attention, every position to every other (no mask)."""

    def __init__(self, d_model, n_heads, rotary=False):
        super().__init__()
        self.n_heads = n_heads
        self.c_attn = nn.Linear(d_model, 3 * d_model)  # queries, keys, values of all heads
        self.c_proj = nn.Linear(d_model, d_model)  # the output projection
        self.rotary = Rotary(d_model // n_heads) if rotary else None

    def forward(self, x, positions=None):
        B, T, C = x.shape  # (B, T, C)
        q, k, v = self.c_attn(x).split(C, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
                   for t in (q, k, v))  # (B, nh, T, hs)
        if self.rotary is not None:
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        y = F.scaled_dot_product_attention(q, k, v)  # softmax(q k^T / sqrt(hs)) v: (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): heads side by side
        return self.c_proj(y)


class MLP(nn.Module):
    """The position-wise feed-forward net: C -> 4 C -> C with a GELU."""

    def __init__(self, d_model):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.c_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))  # (B, T, C) -> (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    """A pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model, n_heads, rotary=False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_heads, rotary=rotary)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model)

    def forward(self, x, positions=None):
        x = x + self.attn(self.ln_1(x), positions)  # (B, T, C)
        x = x + self.mlp(self.ln_2(x))  # (B, T, C)
        return x


class AttentionPooling(nn.Module):
    """One vector per sequence: multi-head attention of a learned query over the T positions.

    Unlike mean pooling (which would dilute the q selected tokens among T)
    or reading one position (a class token would need a position to sit
    at), a learned query can put its weight on the selected positions at any
    length, as the target's average does.
    """

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.query = nn.Parameter(torch.randn(d_model) / math.sqrt(d_model))
        self.c_kv = nn.Linear(d_model, 2 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def weights(self, x):
        """The query's softmax weights over the T positions, per head: (B, nh, T).

        What ``forward`` averages the values with (scaled dot products, as
        ``scaled_dot_product_attention`` computes them); each row sums to 1.
        """
        B, T, C = x.shape  # (B, T, C)
        hs = C // self.n_heads
        k, _ = self.c_kv(x).split(C, dim=2)  # (B, T, C)
        k = k.view(B, T, self.n_heads, hs).transpose(1, 2)  # (B, nh, T, hs)
        q = self.query.view(1, self.n_heads, 1, hs)  # (1, nh, 1, hs)
        scores = (q @ k.transpose(-1, -2)).squeeze(2) / math.sqrt(hs)  # (B, nh, T)
        return torch.softmax(scores, dim=-1)

    def forward(self, x):
        B, T, C = x.shape  # (B, T, C)
        hs = C // self.n_heads
        k, v = self.c_kv(x).split(C, dim=2)  # (B, T, C) each
        k, v = (t.view(B, T, self.n_heads, hs).transpose(1, 2) for t in (k, v))  # (B, nh, T, hs)
        q = self.query.view(1, self.n_heads, 1, hs).expand(B, -1, -1, -1)  # (B, nh, 1, hs)
        y = F.scaled_dot_product_attention(q, k, v)  # (B, nh, 1, hs)
        return self.c_proj(y.reshape(B, C))  # (B, C)


class TransformerEncoder(nn.Module):
    """A standard transformer encoder with attention pooling, for sparse token selection.

    ``h = W_in [x_i; s_i] + sqrt(d_model / 3) p_i`` (tokens and indicator
    projected to ``d_model``, plus the positional vector where the encoding
    adds one, at the scale of an embedded token row: :func:`input_scale`),
    ``n_layers`` pre-norm :class:`Block` s, a final layer norm,
    :class:`AttentionPooling` to one vector and a linear map to R^d.

    Random encodings ("stochastic", "randomized") consume random input, made
    by :meth:`draw_noise` and passed to ``forward(X, noise=...)``, as in
    :class:`~sparse_token_estimators.modules.SparseTokenAttention`: fresh
    for every sequence in training; in eval mode every sequence's own draw,
    derived from ``eval_seed`` and the sequence itself (a hash of its values,
    :func:`~sparse_token_estimators.positional.sequence_keys`), so that a
    prediction depends on its own sequence only (not on its batch) while
    two different sequences get different positions. The module keeps no
    state between predictions: concurrent calls from several threads are
    safe.

    Parameters
    ----------
    token_dim : int
        Token dimension d.
    d_model : int
        Width C of every position's vector.
    n_heads : int
        Attention heads; must divide ``d_model``.
    n_layers : int
        Transformer blocks (0: attention pooling straight on the input
        projection).
    positional_encoding : str
        One of ``ENCODER_ENCODINGS``: the five of ``positional`` (unit vectors
        of dimension ``d_model``, each times :func:`input_scale` (d_model),
        the expected norm of an embedded token row, added to the input
        projection; the factor is the buffer ``pe_scale``), ``"rope"`` or
        ``"none"``. The same in both layouts.
    max_seq_len : int
        Size of the table of the "fixed", "learned" and "randomized"
        encodings: the longest sequence they accept. Unused by the others.
    eval_seed : int
        Seed of the eval-mode positional draws (with the sequence itself);
        an int64 buffer, part of the ``state_dict``.
    layout : {"indicator", "query"}
        The layout of ``X``. In the query layout each of the last
        ``n_selected`` rows, [0_d, i_j], enters as a query flag [0_d, 1] and
        takes the position i_j it names: an absolute encoding adds p_{i_j}
        (the vector of the token it names), RoPE rotates it by the angle of
        i_j; without an encoding it gets nothing, so the model is symmetric
        in the token rows and cannot select (R^2 at most q / T).
    n_selected : int or None
        The number q of query rows (query layout only).

    Examples
    --------
    >>> import torch
    >>> from sparse_token_estimators import make_sparse_selection
    >>> X, _ = make_sparse_selection(8, seq_len=10, token_dim=4, random_state=0)
    >>> net = TransformerEncoder(token_dim=4, d_model=16, n_heads=2).eval()
    >>> net(torch.as_tensor(X)).shape
    torch.Size([8, 4])
    """

    #: defaults for modules pickled before the query layout
    layout = "indicator"
    n_selected = None

    def __init__(self, token_dim, d_model=32, n_heads=2, n_layers=2,
                 positional_encoding="none", max_seq_len=256, eval_seed=0,
                 layout="indicator", n_selected=None):
        super().__init__()
        self.layout = layout
        self.n_selected = n_selected
        if positional_encoding not in ENCODER_ENCODINGS:
            raise ValueError(
                f"positional_encoding must be one of {_names(ENCODER_ENCODINGS)}; got "
                f"{positional_encoding!r}."
            )
        check_encoder_sizes(d_model, n_heads, positional_encoding)
        self.embed = nn.Linear(token_dim + 1, d_model)
        self.positions = (ENCODINGS[positional_encoding](d_model, max_seq_len)
                          if positional_encoding in ENCODINGS else None)
        if self.positions is not None:
            # part of the state_dict: weights saved before the scale load with 1.0
            self.register_buffer("pe_scale", torch.tensor(input_scale(d_model)))
        rotary = positional_encoding == "rope"
        self.blocks = nn.ModuleList(Block(d_model, n_heads, rotary) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.pool = AttentionPooling(d_model, n_heads)
        self.head = nn.Linear(d_model, token_dim)
        self.register_buffer("eval_seed", torch.tensor(eval_seed, dtype=torch.int64))

    def load_state_dict(self, state_dict, *args, **kwargs):
        """torch's ``load_state_dict``; weights saved before the input scale are loaded
        with the scale they were trained at (1.0), which the buffer then records."""
        if self.positions is not None and "pe_scale" not in state_dict:
            state_dict["pe_scale"] = torch.tensor(1.0)  # in place: keeps torch's metadata
        return super().load_state_dict(state_dict, *args, **kwargs)

    def __setstate__(self, state):
        # a module pickled before the input scale keeps the one it was trained at
        super().__setstate__(state)
        if self.positions is not None and "pe_scale" not in dict(
                self.named_buffers(recurse=False)):
            self.register_buffer("pe_scale", torch.tensor(1.0))

    def draw_noise(self, X, generator=None):
        """The random input ``forward(X, noise=...)`` consumes in the current mode.

        Parameters
        ----------
        X : Tensor of shape (B, rows, d + 1)
            The batch; in eval mode its values are hashed, in training only
            its shape and device are read.
        generator : torch.Generator or None
            Source of the training draws (the global generator when None),
            on ``X``'s device. Unused in eval mode.

        Returns
        -------
        noise : Tensor or None
            None for an encoding without randomness. In training, one fresh
            draw for every sequence, from ``generator`` (of shape (1, B, T)
            for the token rows). In eval mode one int64 key per sequence,
            shape (B,): ``sequence_keys(X, eval_seed)``, a hash of the whole
            sequence (in the query layout its query rows too) and of
            ``eval_seed``, from which ``forward`` derives the sequence's own
            positions (``keyed_vectors``). Nothing is kept between calls.
        """
        if self.positions is None or not self.positions.random:
            return None
        if not self.training:
            return sequence_keys(X, int(self.eval_seed))  # (B,)
        if self.layout == "query":  # the positions are the token rows'
            X = X[:, :X.shape[1] - self.n_selected]
        B, T = X.shape[:2]
        return self.positions.draw((1, B, T), generator=generator, device=X.device)

    def _positional_vectors(self, X, noise):
        # X: the token rows (B, T, ...); noise: what draw_noise made for the
        # whole input (None: drawn here, which in the query layout needs the
        # whole input: _encode_query draws it first)
        B, T = X.shape[:2]
        if self.positions is None:
            return None
        if not self.positions.random:
            return self.positions((1, 1, T))[0]  # (1, T, C)
        if noise is None:
            noise = self.draw_noise(X)
        if not self.training:  # one key per sequence: its own draw
            return self.positions.keyed_vectors(noise, range(1), T)[0]  # (B, T, C)
        return self.positions((1, B, T), noise)[0]  # (B, T, C)

    def _encode(self, X, noise):
        if self.layout == "query":
            return self._encode_query(X, noise)
        x = self.embed(X)  # (B, T, C): tokens and indicator together
        P = self._positional_vectors(X, noise)
        if P is not None:
            x = x + self.pe_scale * P  # (B, T, C): at the scale of the embedded rows
        for block in self.blocks:
            x = block(x)  # (B, T, C)
        return self.ln_f(x)  # (B, T, C)

    def attention(self, X, noise=None):
        """The pooling query's weights over the T positions, averaged over heads: (B, T).

        Each row sums to 1: how much of each position's vector the pooled
        vector (and so the prediction) is made of, as the paper's model's
        ``attention`` says how much of each token its output is. The
        self-attention of the blocks (T x T per head and layer) is not
        returned. ``noise`` as in ``forward``. In the query layout the pooled
        rows are the T tokens and the q query rows; the weights of the token
        rows are returned (B, T), and the query rows' share is what they
        leave of 1.
        """
        weights = self.pool.weights(self._encode(X, noise)).mean(1)  # (B, nh, rows) -> (B, rows)
        if self.layout == "query":
            weights = weights[:, : X.shape[1] - self.n_selected]  # (B, T): the token rows
        return weights

    def forward(self, X, noise=None):
        """Predict from ``X`` of shape (B, T, d + 1); returns (B, d).

        ``noise``: what :meth:`draw_noise` returned for this batch in this
        mode; when None it is drawn here (from the global generator in
        training).
        """
        return self.head(self.pool(self._encode(X, noise)))  # (B, T, C) -> (B, C) -> (B, d)

    def _encode_query(self, X, noise):
        # X: (B, T + q, d + 1), T token rows [x_i, 0] then q query rows [0_d, i_j]
        B, rows, _ = X.shape
        T = rows - self.n_selected
        tokens = X[:, :T]  # (B, T, d + 1)
        index = X[:, T:, -1].long() - 1  # (B, q): 0-based positions named
        # a query row's content is only that it is one: its position is its code
        flags = torch.zeros_like(X[:, T:])  # (B, q, d + 1)
        flags[..., -1] = 1.0
        x = self.embed(torch.cat([tokens, flags], dim=1))  # (B, T + q, C)
        if noise is None:
            noise = self.draw_noise(X)  # of the token rows' positions
        P = self._positional_vectors(tokens, noise)  # (B or 1, T, C) or None
        if P is not None:
            P = P.expand(B, -1, -1)  # (B, T, C)
            named = P.gather(1, index.unsqueeze(-1).expand(-1, -1, P.shape[-1]))  # (B, q, C)
            x = x + self.pe_scale * torch.cat([P, named], dim=1)  # (B, T + q, C): p_i, p_{i_j}
        positions = None
        if self.blocks and self.blocks[0].attn.rotary is not None:
            order = torch.arange(T, device=X.device).expand(B, T)  # (B, T)
            positions = torch.cat([order, index], dim=1)  # (B, T + q): rows, then i_j
        for block in self.blocks:
            x = block(x, positions)  # (B, T + q, C)
        return self.ln_f(x)  # (B, T + q, C)


class RecurrentNet(nn.Module):
    """A recurrent net reading the sequence token by token; any length.

    The input at step t is [x_t; s_t], token and indicator. The prediction
    is a linear map of the last layer's hidden state after the last token:
    the net must carry the running average of the selected tokens (d
    numbers, and how many it has seen) in its state.

    Parameters
    ----------
    token_dim : int
        Token dimension d.
    cell : {"gru", "lstm", "rnn"}
        torch's ``nn.GRU``, ``nn.LSTM`` or ``nn.RNN`` (tanh).
    hidden_size : int
        Width of the hidden state.
    n_layers : int
        Stacked recurrent layers.

    Examples
    --------
    >>> import torch
    >>> net = RecurrentNet(token_dim=4, cell="lstm", hidden_size=16)
    >>> net(torch.zeros(8, 10, 5)).shape, net(torch.zeros(8, 40, 5)).shape
    (torch.Size([8, 4]), torch.Size([8, 4]))
    """

    def __init__(self, token_dim, cell="gru", hidden_size=32, n_layers=1):
        super().__init__()
        if cell not in CELLS:
            raise ValueError(f"cell must be one of {_names(CELLS)}; got {cell!r}.")
        self.rnn = CELLS[cell](token_dim + 1, hidden_size, num_layers=n_layers,
                               batch_first=True)
        self.head = nn.Linear(hidden_size, token_dim)

    def forward(self, X):
        _, state = self.rnn(X)  # h_n: (n_layers, B, H); the LSTM's is (h_n, c_n)
        h = state[0] if isinstance(state, tuple) else state
        return self.head(h[-1])  # (B, H) -> (B, d)


__all__ = ["CELLS", "ENCODER_ENCODINGS", "RecurrentNet", "TransformerEncoder",
           "check_encoder_sizes", "input_scale"]
