"""cs336_model.py -- the CS336 staff Transformer LM, cross-entropy and AdamW, op for op as
../../../shared/docs/reference-models.md section 1 describes them, written the way a
student's reference is written -- with the bindings of the staff cs336_basics code
(model.py, nn_utils.py, optimizer.py): which Python names are bound decides how long a
tensor lives, so the names below are part of the measurement, not style. Where the staff
code and reference-models.md's prose differ in a binding (TransformerBlock's x_attn/x_ffn,
cross_entropy negating the whole log-softmax, one `seq` arange for the mask, AdamW's
prev_m_t/m_t), the staff code wins: it is what users run.

einops/einx are not installed here; their calls are spelled with the torch ops they run
(einops.einsum -> torch.einsum with the same equation; rearrange -> view/transpose/reshape),
which allocate the same tensors.

Variants that vramscope offers for this flavour: fused_qkv (one (3d, d) projection whose
output is chunked into Q, K, V views), fused_gate_up (one (2F, d) projection chunked into the
w1 and w3 halves), attention="flash" (F.scaled_dot_product_attention(is_causal=True) instead
of the hand-written scores/softmax), checkpoint_every=N (torch.utils.checkpoint around blocks
0, N, 2N, ..., use_reentrant=False) and a bf16 model (model.to(torch.bfloat16)).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Linear(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        std = math.sqrt(2 / (d_in + d_out))
        self.weight = nn.Parameter(nn.init.trunc_normal_(torch.empty(d_out, d_in), std=std, a=-3 * std, b=3 * std))

    def forward(self, x):
        # einsum(x, self.weight, "... d_in, d_out d_in -> ... d_out")
        return torch.einsum("...i,oi->...o", x, self.weight)


class Embedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.weight = nn.Parameter(nn.init.trunc_normal_(torch.empty(vocab_size, d_model), std=1, a=-3, b=3))

    def forward(self, token_ids):
        return self.weight[token_ids, :]


class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x):
        in_dtype = x.dtype
        x = x.to(torch.float32)
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        x = x * rms
        return (self.weight * x).to(in_dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, context_length, dim, theta=10000.0):
        super().__init__()
        self.register_buffer("_freq_cis_cache", RotaryEmbedding._init_cache(context_length, dim, theta), persistent=False)

    @staticmethod
    def _init_cache(context_length, dim, theta):
        d = torch.arange(0, dim, 2) / dim
        freqs = theta ** -d
        t = torch.arange(context_length)
        freqs = torch.einsum("t,f->tf", t, freqs)
        cos, sin = torch.cos(freqs), torch.sin(freqs)
        return torch.stack((cos, sin))          # (2, context_length, dim/2)

    def forward(self, x, pos_ids):
        # x1, x2 = rearrange(x, "... (half_d xy) -> xy ... half_d", xy=2): strided views
        x1, x2 = x.unflatten(-1, (-1, 2)).movedim(-1, 0)
        # cos, sin = self._freq_cis_cache[:, pos_ids, :]: the gather copies; autograd saves the copy
        cos, sin = self._freq_cis_cache[:, pos_ids, :]
        x1_rot = cos * x1 - sin * x2
        x2_rot = sin * x1 + cos * x2
        # rearrange('... x_half, ... x_half -> ... (x_half (1 + 1))').contiguous()
        result = torch.stack((x1_rot, x2_rot), dim=-1).flatten(-2).contiguous()
        return result


def softmax(x, dim=-1):
    rescaled_input = x - torch.max(x, dim=dim, keepdim=True)[0]
    exponentiated_rescaled_input = torch.exp(rescaled_input)
    return exponentiated_rescaled_input / torch.sum(exponentiated_rescaled_input, dim=dim, keepdim=True)


def scaled_dot_product_attention(K, Q, V, mask=None):
    d_k = K.shape[-1]
    attention_scores = torch.einsum("...qd,...kd->...qk", Q, K) / math.sqrt(d_k)
    if mask is not None:
        attention_scores = torch.where(mask, attention_scores, float("-inf"))
    attention_weights = softmax(attention_scores, dim=-1)
    return torch.einsum("...qk,...kd->...qd", attention_weights, V)


class CausalMultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads, positional_encoder, fused_qkv=False, flash=False):
        super().__init__()
        self.d_model, self.num_heads = d_model, num_heads
        self.d_k = d_model // num_heads
        self.fused_qkv, self.flash = fused_qkv, flash
        if fused_qkv:
            self.qkv_proj = Linear(d_model, 3 * d_model)
        else:
            self.q_proj = Linear(d_model, d_model)
            self.k_proj = Linear(d_model, d_model)
            self.v_proj = Linear(d_model, d_model)
        self.output_proj = Linear(d_model, d_model)
        self.positional_encoder = positional_encoder

    def forward(self, x):
        *b, sequence_length, d_model = x.size()
        if self.fused_qkv:
            Q, K, V = self.qkv_proj(x).chunk(3, dim=-1)
        else:
            Q = self.q_proj(x)
            K = self.k_proj(x)
            V = self.v_proj(x)
        # rearrange(X, "... seq (heads d) -> ... heads seq d")
        Q, K, V = (X.unflatten(-1, (self.num_heads, self.d_k)).transpose(-3, -2) for X in (Q, K, V))
        # einx.rearrange("seq -> b... seq", torch.arange(sequence_length), b=[1] * len(b))
        token_positions = torch.arange(sequence_length, device=x.device).view(*([1] * len(b)), sequence_length)
        token_positions = token_positions.unsqueeze(-2)          # "... seq -> ... 1 seq"
        Q = self.positional_encoder(Q, token_positions)
        K = self.positional_encoder(K, token_positions)
        if self.flash:
            attn_output = F.scaled_dot_product_attention(Q, K, V, is_causal=True)
        else:
            # one arange bound to `seq`; qi, kj are views of it (all live until return)
            seq = torch.arange(sequence_length, device=x.device)
            qi = seq.view(*([1] * len(b)), 1, sequence_length, 1)   # 'query -> b... 1 query 1'
            kj = seq.view(*([1] * len(b)), 1, 1, sequence_length)   # 'key -> b... 1 1 key'
            causal_mask = qi >= kj
            attn_output = scaled_dot_product_attention(K=K, Q=Q, V=V, mask=causal_mask)
        # rearrange(attn_output, "batch heads seq d_v -> batch seq (heads d_v)").contiguous()
        attn_output = attn_output.transpose(-3, -2).reshape(*b, sequence_length, d_model).contiguous()
        output = self.output_proj(attn_output)
        return output


def silu(x):
    return x * torch.sigmoid(x)


class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff, fused_gate_up=False):
        super().__init__()
        self.fused_gate_up = fused_gate_up
        if fused_gate_up:
            self.gate_up_proj = Linear(d_model, 2 * d_ff)
            self.w2 = Linear(d_ff, d_model)
        else:
            self.w1 = Linear(d_model, d_ff)
            self.w2 = Linear(d_ff, d_model)
            self.w3 = Linear(d_model, d_ff)

    def forward(self, x):
        if self.fused_gate_up:
            a, b = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.w2(silu(a) * b)
        return self.w2(silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, positional_encoder, fused_qkv=False, fused_gate_up=False, flash=False):
        super().__init__()
        self.ln1 = RMSNorm(d_model)
        self.attn = CausalMultiHeadSelfAttention(d_model, num_heads, positional_encoder, fused_qkv, flash)
        self.ln2 = RMSNorm(d_model)
        self.ffn = SwiGLU(d_model, d_ff, fused_gate_up)

    def forward(self, x):
        # every sub-result is a name: x_attn lives through the feed-forward sublayer
        x_attn = self.attn(self.ln1(x))
        attn_sublayer_output = x + x_attn
        x_ffn = self.ffn(self.ln2(attn_sublayer_output))
        ffn_sublayer_output = attn_sublayer_output + x_ffn
        return ffn_sublayer_output


class BasicsTransformerLM(nn.Module):
    def __init__(self, vocab_size, context_length, d_model, num_layers, num_heads, d_ff, rope_theta=10000.0,
                 fused_qkv=False, fused_gate_up=False, flash=False, checkpoint_every=None):
        super().__init__()
        self.token_embeddings = Embedding(vocab_size, d_model)
        rope = RotaryEmbedding(context_length, d_model // num_heads, rope_theta)
        self.layers = nn.ModuleList([TransformerBlock(d_model, num_heads, d_ff, rope, fused_qkv, fused_gate_up, flash)
                                     for _ in range(num_layers)])
        self.ln_final = RMSNorm(d_model)
        self.lm_head = Linear(d_model, vocab_size)
        self.checkpoint_every = checkpoint_every

    def forward(self, x):
        x = self.token_embeddings(x)
        for i, layer in enumerate(self.layers):
            if self.checkpoint_every is not None and i % self.checkpoint_every == 0:
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        x = self.ln_final(x)
        return self.lm_head(x)


def log_softmax(x, dim=-1):
    x_max = torch.max(x, dim=dim, keepdim=True)[0]
    x = x - x_max
    return x - torch.log(torch.sum(torch.exp(x), dim=dim, keepdim=True))


def cross_entropy(inputs, targets):
    """Mean of -log_softmax gathered at the targets: the whole (B, S, V) log-softmax is
    negated before the gather."""
    negative_log_softmax_logits = -log_softmax(inputs)
    return torch.mean(torch.gather(negative_log_softmax_logits, -1, targets.unsqueeze(-1)))


class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        defaults = {"lr": lr, "beta1": betas[0], "beta2": betas[1], "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = None if closure is None else closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]
                alpha = group["lr"]
                beta_1, beta_2 = group["beta1"], group["beta2"]
                eps = group["eps"]
                t = state.get("t", 1)
                # The zeros_like defaults are evaluated on every step, even once m/v exist.
                # Old and new moments have their own names: prev_m_t/prev_v_t keep the old
                # ones alive until the next parameter's iteration rebinds them.
                prev_m_t = state.get("m", torch.zeros_like(grad))
                prev_v_t = state.get("v", torch.zeros_like(grad))
                m_t = beta_1 * prev_m_t + ((1 - beta_1) * grad)
                v_t = beta_2 * prev_v_t + ((1 - beta_2) * torch.square(grad))
                alpha_t = alpha * (math.sqrt(1 - (beta_2 ** t)) / (1 - (beta_1 ** t)))
                p.data -= alpha_t * m_t / (torch.sqrt(v_t) + eps)
                p.data -= alpha * group["weight_decay"] * p.data
                state["m"] = m_t
                state["v"] = v_t
                state["t"] = t + 1
        return loss
