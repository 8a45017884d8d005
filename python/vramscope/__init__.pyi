"""Type stubs of the vramscope package. The functions' keywords (below the BEGIN line) are
generated from the command line's clap flags by ``_keywords.write_stub()``;
python/tests/test_keywords.py fails when they drift."""
from os import PathLike
from typing import Any, Dict, List, Literal, Optional, Sequence, Union

__version__: str
__all__: List[str]

class Report:
    html: str
    title: str
    def save(self, path: Union[str, PathLike[str]]) -> str: ...
    def _repr_html_(self) -> str: ...

class Run:
    data: Dict[str, Any]
    def __getitem__(self, key: str) -> Any: ...
    @property
    def context_length(self) -> int: ...
    @property
    def profile_type(self) -> str: ...
    @property
    def rank(self) -> Optional[int]: ...
    @property
    def peak_allocated_bytes(self) -> int: ...
    @property
    def peak_allocated_gib(self) -> float: ...
    @property
    def peak_reserved_bytes(self) -> int: ...
    @property
    def peak_reserved_gib(self) -> float: ...
    @property
    def oom(self) -> Optional[str]: ...
    @property
    def fits(self) -> bool: ...
    @property
    def oom_phase(self) -> Optional[str]: ...
    @property
    def phases(self) -> List[Dict[str, Any]]: ...
    @property
    def categories(self) -> List[Dict[str, Any]]: ...
    @property
    def modules(self) -> List[Dict[str, Any]]: ...
    def label(self) -> str: ...

class ProfileResult:
    summary: Dict[str, Any]
    notes: List[str]
    runs: List[Run]
    @property
    def peak_allocated_bytes(self) -> int: ...
    @property
    def peak_allocated_gib(self) -> float: ...
    @property
    def peak_reserved_bytes(self) -> int: ...
    @property
    def peak_reserved_gib(self) -> float: ...
    @property
    def oom(self) -> Optional[str]: ...
    @property
    def fits(self) -> bool: ...
    @property
    def phases(self) -> List[Dict[str, Any]]: ...
    @property
    def categories(self) -> List[Dict[str, Any]]: ...
    @property
    def phases_df(self) -> Any: ...
    @property
    def categories_df(self) -> Any: ...
    def save_snapshot(self, path: Union[str, PathLike[str]], run: int = 0) -> str: ...
    def save_report(self, path: Union[str, PathLike[str]], run: int = 0) -> str: ...
    def text(self, run: Optional[int] = None) -> str: ...
    def report_html(self, run: int = 0) -> str: ...
    def report(self, run: int = 0) -> Report: ...
    def _repr_html_(self) -> str: ...

class JobResult:
    data: Any
    MAX_HTML_ROWS: int
    def __getitem__(self, key: str) -> Any: ...
    @property
    def rows(self) -> List[Dict[str, Any]]: ...
    @property
    def df(self) -> Any: ...
    def _repr_html_(self) -> str: ...

class AnalyzeResult(JobResult):
    @property
    def categories(self) -> List[Dict[str, Any]]: ...
    @property
    def largest(self) -> List[Dict[str, Any]]: ...
    @property
    def categories_df(self) -> Any: ...
    @property
    def largest_df(self) -> Any: ...

# BEGIN generated from the clap flags by `python -c 'from vramscope import _keywords; _keywords.write_stub()'`: do not edit

def profile(
    model: Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']] = None,
    *,
    config: Any = None,
    flavour: Optional[Literal['cs336', 'tinyllama', 'hf']] = None,
    hidden_dim: Optional[int] = None,
    num_layers: Optional[int] = None,
    num_heads: Optional[int] = None,
    num_kv_heads: Optional[int] = None,
    intermediate_dim: Optional[int] = None,
    vocab_size: Optional[int] = None,
    max_seq_len: Optional[int] = None,
    rope_theta: Optional[float] = None,
    norm_eps: Optional[float] = None,
    attention: Optional[Literal['naive', 'flash']] = None,
    attn_implementation: Optional[Literal['eager', 'sdpa', 'flash_attention_2']] = None,
    sdpa_backend: Optional[Literal['auto', 'flash', 'efficient', 'math', 'cpu_flash', 'cudnn']] = None,
    use_cache: Optional[Literal['true', 'false']] = None,
    logits_to_keep: Optional[int] = None,
    gradient_checkpointing: Optional[Literal['none', 'non-reentrant', 'reentrant']] = None,
    attention_mask: Optional[Literal['none', 'ones']] = None,
    lora_r: Optional[int] = None,
    lora_alpha: Optional[float] = None,
    lora_dropout: Optional[float] = None,
    target_modules: Optional[Literal['all-linear', 'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'w1', 'w3', 'w2', 'gate']] = None,
    target_parameters: Optional[Literal['mlp.gate.weight', 'mlp.router.weight', 'mlp.experts.gate_up_proj', 'mlp.experts.down_proj']] = None,
    lora_bias: Optional[str] = None,
    use_dora: bool = False,
    modules_to_save: Optional[Literal['embed_tokens', 'lm_head']] = None,
    load_in_4bit: bool = False,
    bnb_4bit_quant_type: Optional[Literal['fp4', 'nf4']] = None,
    bnb_4bit_use_double_quant: bool = False,
    bnb_4bit_compute_dtype: Optional[Literal['float32', 'bfloat16', 'float16']] = None,
    bnb_4bit_quant_storage: Optional[Literal['uint8', 'bfloat16', 'float16', 'float32']] = None,
    prepare_model_for_kbit_training: Optional[str] = None,
    load_in_8bit: bool = False,
    llm_int8_threshold: Optional[float] = None,
    experts_implementation: Optional[str] = None,
    routing: Optional[str] = None,
    output_router_logits: bool = False,
    precision: Optional[Literal['fp32', 'bf16', 'fp16', 'pure-bf16']] = None,
    use_mixed_precision: bool = False,
    dtype: Optional[Literal['auto', 'float32', 'bfloat16', 'float16', 'bf16', 'fp16']] = None,
    use_amp: bool = False,
    pure_bf16: bool = False,
    autocast_by: Optional[Literal['accelerate', 'torch']] = None,
    checkpoint: Optional[Literal['none', 'blocks', 'every-N']] = None,
    fusion: Optional[Literal['none', 'all']] = None,
    fused_qkv: bool = False,
    fused_gate_up: bool = False,
    optimizer: Optional[Literal['adamw_torch_fused', 'adamw_torch', 'adamw_torch_forloop', 'sgd', 'adamw_cs336', 'adamw_bnb_8bit', 'paged_adamw_8bit', 'paged_adamw_32bit', 'adafactor']] = None,
    max_grad_norm: Optional[float] = None,
    parallel: Optional[Literal['ddp', 'zero1', 'zero2', 'fsdp', 'hsdp', 'tp']] = None,
    world_size: Optional[int] = None,
    rank: Optional[int] = None,
    gpus_per_node: Optional[int] = None,
    no_reshard_after_forward: bool = False,
    fsdp_param_dtype: Optional[Literal['bf16', 'fp16', 'fp32']] = None,
    fsdp_reduce_dtype: Optional[Literal['bf16', 'fp16', 'fp32']] = None,
    fsdp_unit: Optional[str] = None,
    offload: Optional[Literal['params']] = None,
    tp: Optional[int] = None,
    sequence_parallel: bool = False,
    tp_plan: Optional[Literal['auto', 'torch']] = None,
    cache_implementation: Optional[str] = None,
    disable_compile: bool = False,
    do_sample: bool = False,
    temperature: Optional[float] = None,
    top_k: Optional[int] = None,
    top_p: Optional[float] = None,
    min_new_tokens: Optional[int] = None,
    num_beams: Optional[int] = None,
    num_return_sequences: Optional[int] = None,
    context_length: Optional[Union[str, int, float, Sequence[Any]]] = None,
    batch_size: Optional[int] = None,
    warmup_steps: int = 1,
    measure_steps: int = 1,
    max_entries: int = 1000000,
    profile_type: Union[Literal['forward', 'forward-loss', 'inference', 'training', 'generate'], Sequence[Literal['forward', 'forward-loss', 'inference', 'training', 'generate']]] = 'training',
    max_new_tokens: Optional[int] = None,
    device: str = 'cpu',
    gpu: Optional[Literal['H100-80GB', 'H200-141GB', 'A100-40GB', 'A100-80GB', 'MI250X-64GB', 'MI300X-192GB', 'RTX4090-24GB', 'RTXA6000-48GB']] = None,
    memory_limit: Optional[str] = None,
    memory_fraction: Optional[float] = None,
    allocator_conf: Optional[str] = None,
    threads: Optional[int] = None,
    seed: int = 42,
    grad_accum_steps: int = 1,
    flops: bool = False,
    flops_depth: int = 3,
) -> ProfileResult:
    """``vramscope profile``: Profile memory like CS336's profile_memory.py: snapshot, summary, peak
    table.

    Profile one model (a preset name, or ``config=``) at each ``context_length`` and
    ``profile_type``: peaks, per-phase and per-category tables, the OOM if any. Nothing is written
    until ``save_snapshot`` / ``save_report``.

    Keywords are the command's flags in Python spelling (``context_length=512`` is
    ``--context-length 512``, ``flops=True`` is ``--flops``, a list is a comma list); defaults and
    checks are the command line's. An unknown keyword raises TypeError, a bad value ValueError.

    Parameters
    ----------
    model : Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']], default None
        Model preset (the names below; a cs336-/tinyllama-/hf- prefix is accepted on any) small,
        medium and large exist in both cs336 and tinyllama: a bare name takes the command's seed's
        (profile, sweep, fit, estimate, run-all: CS336's; train, study: the workshop's); cs336-NAME
        / tinyllama-NAME or --flavour choose explicitly. Names are case-insensitive. One of:
        cs336-small, cs336-medium, cs336-large, xl, 2.7B, walkthrough, script, tiny,
        tinyllama-small, tinyllama-medium, tinyllama-large, very_large, Llama-3.2-1B, Llama-3.1-8B,
        Llama-3.1-70B, Mistral-7B, Qwen2.5-7B, Qwen3-8B, Phi-3-mini, OLMo-2-7B, Gemma-2-9B,
        Gemma-3-27B, Mixtral-8x7B, Qwen3-30B-A3B, gpt-oss-20b, gpt-oss-120b, DeepSeek-V3,
        Mistral-7B-v0.3. [--preset; also model_size=, preset=]
    config : Any, default None
        A Hugging Face config.json (or a model folder holding one) instead of a preset Only
        config.json is read: model_type llama, mistral, qwen2, qwen3, phi3, olmo2, gemma2,
        gemma3_text, mixtral, qwen3_moe, qwen2_moe, gpt_oss or deepseek_v3, run as transformers
        5.23.0's modeling code (the hf flavour), with that release's config defaults. Its
        torch_dtype is the weights' type, as from_pretrained(dtype="auto") loads them (--dtype
        overrides it). Shape flags override it; --flavour cs336|tinyllama maps a plain llama shape
        onto those flavours. Also a dict (a config.json's content) or a transformers
        ``PretrainedConfig`` (anything with ``to_dict()``). [--config]
    flavour : Optional[Literal['cs336', 'tinyllama', 'hf']], default None
        Reference implementation to reproduce. One of: cs336, tinyllama, hf. [--flavour]
    hidden_dim : Optional[int], default None
        Hidden size d_model. [--hidden-dim]
    num_layers : Optional[int], default None
        Transformer layers (also the workshop guide's --n-layers). [--num-layers; also n_layers=]
    num_heads : Optional[int], default None
        Attention heads (also --n-heads). [--num-heads; also n_heads=]
    num_kv_heads : Optional[int], default None
        Key/value heads (grouped-query attention when fewer than --num-heads; also --n-kv-heads).
        [--num-kv-heads; also n_kv_heads=]
    intermediate_dim : Optional[int], default None
        Feed-forward size d_ff. [--intermediate-dim]
    vocab_size : Optional[int], default None
        Vocabulary size (rows of the embedding and the LM head). [--vocab-size]
    max_seq_len : Optional[int], default None
        Longest sequence the model accepts (sizes cs336's RoPE buffer) Default: the preset's, raised
        to the run's sequence length as both seed scripts do. [--max-seq-len]
    rope_theta : Optional[float], default None
        RoPE base frequency theta. [--rope-theta]
    norm_eps : Optional[float], default None
        RMSNorm epsilon. [--norm-eps]
    attention : Optional[Literal['naive', 'flash']], default None
        Attention computation (cs336 and tinyllama flavours). One of: naive, flash. [--attention]
    attn_implementation : Optional[Literal['eager', 'sdpa', 'flash_attention_2']], default None
        hf flavour: transformers' attn_implementation (default sdpa, as transformers'). One of:
        eager, sdpa, flash_attention_2. [--attn-implementation]
    sdpa_backend : Optional[Literal['auto', 'flash', 'efficient', 'math', 'cpu_flash', 'cudnn']], default None
        hf flavour, sdpa: the kernel F.scaled_dot_product_attention runs on CUDA auto (the default)
        is what PyTorch 2.11 picks for the dtype, mask and GPU (cuDNN attention for fp16/bf16 on an
        H100/H200 --gpu, else flash); it is printed with the run. One of: auto, flash, efficient,
        math, cpu_flash, cudnn. [--sdpa-backend]
    use_cache : Optional[Literal['true', 'false']], default None
        hf flavour: use_cache true|false (default: the config's) true for every shipped preset: a
        forward fills a DynamicCache with each layer's keys and values. One of: true, false.
        [--use-cache]
    logits_to_keep : Optional[int], default None
        hf flavour: logits_to_keep: the LM head runs on the last N positions only (0: all)
        transformers' loss needs every position, so N < the context is for inference.
        [--logits-to-keep]
    gradient_checkpointing : Optional[Literal['none', 'non-reentrant', 'reentrant']], default None
        hf flavour: gradient_checkpointing_enable(): none, non-reentrant or reentrant non-reentrant
        is use_reentrant=False, the same as --checkpoint blocks. One of: none, non-reentrant,
        reentrant. [--gradient-checkpointing]
    attention_mask : Optional[Literal['none', 'ones']], default None
        hf flavour: the attention_mask passed with the batch: none (the default) or ones ones is
        what an unpadded tokenizer batch carries. One of: none, ones. [--attention-mask]
    lora_r : Optional[int], default None
        hf flavour, peft LoraConfig's r: turns LoRA on get_peft_model over the loaded model: base
        weights frozen, fp32 adapters lora_A/lora_B trained. [--lora-r]
    lora_alpha : Optional[float], default None
        LoraConfig's lora_alpha (peft's default 8; scaling = alpha / r). [--lora-alpha]
    lora_dropout : Optional[float], default None
        LoraConfig's lora_dropout on the adapters' input in training (peft's default 0.0).
        [--lora-dropout]
    target_modules : Optional[Literal['all-linear', 'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'w1', 'w3', 'w2', 'gate']], default None
        LoraConfig's target_modules: all-linear, or a comma list of modules peft's default is
        q_proj,v_proj for llama, mistral, qwen2, qwen3, gemma2 and gemma3_text; phi3, olmo2 and the
        mixture-of-experts types need them named (Phi-3's are qkv_proj, o_proj, gate_up_proj,
        down_proj; an MoE model's adaptable linears are its attention's). On mixtral, qwen3_moe and
        deepseek_v3 peft converts the transformers-4 names of the experts and the router (mixtral:
        w1, w3, w2, gate; the others: gate_proj, up_proj, down_proj, gate), all-linear included,
        into --target-parameters, with r and lora_alpha doubled on gate_up_proj (both of its halves
        must be named). One of: all-linear, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
        down_proj, qkv_proj, gate_up_proj, w1, w3, w2, gate. [--target-modules]
    target_parameters : Optional[Literal['mlp.gate.weight', 'mlp.router.weight', 'mlp.experts.gate_up_proj', 'mlp.experts.down_proj']], default None
        LoraConfig's target_parameters: a comma list of a sparse MoE block's parameters peft's
        ParamWrapper (one LoRA per expert) on mlp.experts.gate_up_proj, mlp.experts.down_proj and
        the router's mlp.gate.weight (gpt_oss: mlp.router.weight; matched by suffix as peft matches
        them). Without --target-modules no module is adapted. One of: mlp.gate.weight,
        mlp.router.weight, mlp.experts.gate_up_proj, mlp.experts.down_proj. [--target-parameters]
    lora_bias : Optional[str], default None
        LoraConfig's bias: none (peft's default), all or lora_only all: every bias of the model
        trains; lora_only: the adapted projections' biases train. [--lora-bias]
    use_dora : bool, default False
        LoraConfig's use_dora: DoRA (weight-decomposed LoRA) on the adapted projections A trainable
        fp32 magnitude per output feature; every forward rebuilds the adapter's dense update and the
        weight's row norms (a 4-bit weight is dequantized for it). [--use-dora]
    modules_to_save : Optional[Literal['embed_tokens', 'lm_head']], default None
        LoraConfig's modules_to_save: a comma list of embed_tokens and lm_head peft's
        ModulesToSaveWrapper: the original module kept frozen and a trainable deep copy in its dtype
        (after prepare_model_for_kbit_training's fp32 cast under 4-bit), with its gradient and
        optimizer state. On a model with tied embeddings the copy unties them (peft warns): the
        other end keeps the frozen original. One of: embed_tokens, lm_head. [--modules-to-save]
    load_in_4bit : bool, default False
        hf flavour, BitsAndBytesConfig's load_in_4bit (QLoRA with --lora-r) Every decoder linear is
        stored in 4 bits by bitsandbytes (lm_head, embedding and norms unquantized).
        [--load-in-4bit]
    bnb_4bit_quant_type : Optional[Literal['fp4', 'nf4']], default None
        BitsAndBytesConfig's bnb_4bit_quant_type: fp4 (bitsandbytes' default) or nf4. One of: fp4,
        nf4. [--bnb-4bit-quant-type]
    bnb_4bit_use_double_quant : bool, default False
        BitsAndBytesConfig's bnb_4bit_use_double_quant 8-bit block scales, one fp32 scale per 256
        blocks. [--bnb-4bit-use-double-quant]
    bnb_4bit_compute_dtype : Optional[Literal['float32', 'bfloat16', 'float16']], default None
        BitsAndBytesConfig's bnb_4bit_compute_dtype: float32 (the default), bfloat16 or float16. One
        of: float32, bfloat16, float16. [--bnb-4bit-compute-dtype]
    bnb_4bit_quant_storage : Optional[Literal['uint8', 'bfloat16', 'float16', 'float32']], default None
        BitsAndBytesConfig's bnb_4bit_quant_storage: uint8 (the default), or the compute dtype for
        FSDP-QLoRA (the same packed bytes). One of: uint8, bfloat16, float16, float32.
        [--bnb-4bit-quant-storage]
    prepare_model_for_kbit_training : Optional[str], default None
        peft's prepare_model_for_kbit_training on the 4-bit or 8-bit model: true (the default; false
        with --profile-type generate) or false QLoRA recipes call it: unquantized parameters cast to
        fp32, gradient checkpointing with its reentrant default. An inference script does not, so
        generate() runs the model as from_pretrained loads it unless this is given.
        [--prepare-model-for-kbit-training]
    load_in_8bit : bool, default False
        hf flavour, BitsAndBytesConfig's load_in_8bit: LLM.int8() (LoRA with --lora-r) Every decoder
        linear is a bitsandbytes Linear8bitLt: int8 weights with an fp32 scale per row (lm_head,
        embedding and norms unquantized); inputs quantized to int8 per row. [--load-in-8bit]
    llm_int8_threshold : Optional[float], default None
        BitsAndBytesConfig's llm_int8_threshold (default 6.0; 0 turns the outlier split off) With a
        threshold, input columns holding |x| >= it would be multiplied in 16 bits; vramscope counts
        no such column (a normalized input rarely has one). [--llm-int8-threshold]
    experts_implementation : Optional[str], default None
        hf flavour, mixture of experts: transformers' experts_implementation: grouped_mm (the
        default), batched_mm or eager grouped_mm sorts the tokens by expert and runs two grouped
        matmuls; batched_mm gathers each token's expert weights and runs a bmm; eager loops over the
        experts that were hit. [--experts-implementation]
    routing : Optional[str], default None
        hf flavour, mixture of experts: how many tokens each expert gets: balanced (the default),
        worst, or a file of per-expert counts balanced splits the tokens evenly; worst sends every
        token to the same top-k experts; a file holds one count per expert (whitespace or commas)
        adding up to tokens × top-k, where tokens is batch × context. [--routing]
    output_router_logits : bool, default False
        hf flavour, mixture of experts: transformers' output_router_logits: keep every router's
        logits and add the router's auxiliary loss Mixtral, Qwen3-MoE, Qwen2-MoE and gpt-oss:
        load_balancing_loss_func runs on the kept logits in every profile type (transformers
        computes it without labels too), and training adds router_aux_loss_coef (the config's, 0.001
        by default) times it to the loss. DeepSeek-V3 has no such loss. [--output-router-logits]
    precision : Optional[Literal['fp32', 'bf16', 'fp16', 'pure-bf16']], default None
        Training precision (default fp32) bf16: autocast to bf16 around forward and loss; fp16:
        autocast to fp16 with a dynamic loss scaler — parameters, gradients and optimizer state stay
        fp32 — or pure-bf16 (= --pure-bf16). One of: fp32, bf16, fp16, pure-bf16. [--precision]
    use_mixed_precision : bool, default False
        CS336 spelling of autocast: with --dtype bf16 (default) or fp16. [--use-mixed-precision]
    dtype : Optional[Literal['auto', 'float32', 'bfloat16', 'float16', 'bf16', 'fp16']], default None
        hf flavour: from_pretrained's dtype; with --use-mixed-precision: the autocast type auto (the
        default, as in transformers 5: the config's torch_dtype, bfloat16 for every hf preset;
        float32 when it names none), float32, bfloat16 or float16. With --use-mixed-precision:
        CS336's autocast type, bf16 or fp16. One of: auto, float32, bfloat16, float16, bf16, fp16.
        [--dtype]
    use_amp : bool, default False
        The workshop's spelling: fp16 autocast with a GradScaler. [--use-amp]
    pure_bf16 : bool, default False
        Parameters, gradients and optimizer state in bf16 (`model.to(torch.bfloat16)`), no autocast.
        [--pure-bf16]
    autocast_by : Optional[Literal['accelerate', 'torch']], default None
        Who applies the autocast, hf flavour: accelerate (default) or torch. accelerate is the
        Trainer's bf16=True/fp16=True (or `Accelerator(mixed_precision=...)`): `prepare_model` wraps
        the model's forward in autocast and `convert_outputs_to_fp32`, so the output's bf16/fp16
        tensors (the logits, an MoE model's router logits) get an fp32 copy that lives until
        compute_loss drops the output (training and forward-loss). torch is your own loop's `with
        torch.autocast(...)` around the model call, no conversion. The cs336 and tinyllama flavours
        run their scripts' plain torch.autocast. One of: accelerate, torch. [--autocast-by]
    checkpoint : Optional[Literal['none', 'blocks', 'every-N']], default None
        Activation checkpointing: none, blocks or every-N torch.utils.checkpoint with
        use_reentrant=False, on every decoder block (blocks) or on blocks 0, N, 2N, … (every-N). One
        of: none, blocks, every-N. [--checkpoint]
    fusion : Optional[Literal['none', 'all']], default None
        Projection fusions of the workshop's version 2: none or all all is --fused-qkv and
        --fused-gate-up; its flash attention is --attention flash. One of: none, all. [--fusion]
    fused_qkv : bool, default False
        One QKV projection whose output is split into Q, K, V views. [--fused-qkv]
    fused_gate_up : bool, default False
        One gate/up projection whose output is chunked into two views. [--fused-gate-up]
    optimizer : Optional[Literal['adamw_torch_fused', 'adamw_torch', 'adamw_torch_forloop', 'sgd', 'adamw_cs336', 'adamw_bnb_8bit', 'paged_adamw_8bit', 'paged_adamw_32bit', 'adafactor']], default None
        Optimizer implementation, in the Trainer's `optim` names (default: the flavour's) The
        flavour's reference is the default: cs336 adamw_cs336, tinyllama adamw_torch, hf
        adamw_torch_fused (the Trainer's default). adamw_torch_foreach is adamw_torch and adamw_8bit
        is adamw_bnb_8bit; bitsandbytes' optimizers need --device meta. One of: adamw_torch_fused,
        adamw_torch, adamw_torch_forloop, sgd, adamw_cs336, adamw_bnb_8bit, paged_adamw_8bit,
        paged_adamw_32bit, adafactor. [--optimizer]
    max_grad_norm : Optional[float], default None
        clip_grad_norm_(params, X) before each optimizer step; 0 = off
        torch.nn.utils.clip_grad_norm_; the hf flavour's Trainer still computes the norm, with
        max_norm inf, to log it. Default: the flavour's: 1.0 for hf (the Trainer's max_grad_norm),
        off for cs336 and tinyllama. [--max-grad-norm]
    parallel : Optional[Literal['ddp', 'zero1', 'zero2', 'fsdp', 'hsdp', 'tp']], default None
        Simulate one rank of a parallel job with this layout (needs --world-size). One of: ddp,
        zero1, zero2, fsdp, hsdp, tp. [--parallel]
    world_size : Optional[int], default None
        Ranks in the job (with --parallel). [--world-size]
    rank : Optional[int], default None
        Profile only this rank (default: rank 0 and every rank whose shard sizes differ). [--rank]
    gpus_per_node : Optional[int], default None
        hsdp: ranks per node, the shard group (default 8). [--gpus-per-node]
    no_reshard_after_forward : bool, default False
        fsdp/hsdp: keep each block's unsharded parameters from forward to backward
        fully_shard(reshard_after_forward=False), ZeRO-2-like. [--no-reshard-after-forward]
    fsdp_param_dtype : Optional[Literal['bf16', 'fp16', 'fp32']], default None
        fsdp/hsdp: MixedPrecisionPolicy(param_dtype=...): bf16, fp16 or fp32. One of: bf16, fp16,
        fp32. [--fsdp-param-dtype]
    fsdp_reduce_dtype : Optional[Literal['bf16', 'fp16', 'fp32']], default None
        fsdp/hsdp: MixedPrecisionPolicy(reduce_dtype=...): bf16, fp16 or fp32. One of: bf16, fp16,
        fp32. [--fsdp-reduce-dtype]
    fsdp_unit : Optional[str], default None
        zero2/fsdp/hsdp units: block (the default), every-N or root block: fully_shard on each
        decoder block, then the root; every-N: on each group of N consecutive blocks; root:
        fully_shard(model) alone, every parameter gathered at once. [--fsdp-unit]
    offload : Optional[Literal['params']], default None
        params: FSDP2's CPUOffloadPolicy Sharded parameters, gradients and the optimizer step on the
        host; host memory is reported separately. One of: params. [--offload]
    tp : Optional[int], default None
        Tensor-parallel ranks (hf flavour) torch's Megatron-style plan (q/k/v/gate/up
        ColwiseParallel, o/down RowwiseParallel, vocabulary-parallel embedding, head gathered) on
        Llama-style models, transformers' own on phi3, olmo2, gemma2, gemma3_text and the MoE models
        but gpt-oss (their experts under moe_tp_experts; --tp-plan). With --parallel fsdp or zero2:
        a (world-size / N, N) mesh, FSDP2 over the first dimension (2-D); --parallel tp: N =
        --world-size. [--tp]
    sequence_parallel : bool, default False
        With --parallel tp: torch's SequenceParallel plan too Norms and the residual stream on S / N
        positions, hidden states all-gathered before attention, the MLP and the head; the batch
        passes position_ids. [--sequence-parallel]
    tp_plan : Optional[Literal['auto', 'torch']], default None
        With --tp: whose plan shards the model, auto or torch auto: transformers' own
        (from_pretrained(tp_plan="auto"): the config's base_model_tp_plan, the embedding
        vocabulary-parallel, the head gathered), the only plan on phi3, olmo2, gemma2, gemma3_text,
        mixtral, qwen3_moe, qwen2_moe and deepseek_v3 (the experts' packed_colwise gate_up and
        rowwise down under moe_tp_experts); torch: the Megatron-style plan above, the default on
        Llama-style models. One of: auto, torch. [--tp-plan]
    cache_implementation : Optional[str], default None
        generate's cache_implementation: dynamic (DynamicCache, the default) or static static:
        StaticCache, max_new_tokens + prompt - 1 positions per layer allocated at the prefill and
        written in place (a sliding layer of Gemma 2/3, gpt-oss, Mistral, Mixtral, Phi-3, Qwen2,
        Qwen3 or Qwen3-MoE: at most its window, rolled once full; DeepSeek-V3: its latent and
        k_rot); needs --disable-compile (on CUDA transformers otherwise compiles the decode forward,
        which is not modelled). offloaded is not modelled. [--cache-implementation]
    disable_compile : bool, default False
        GenerationConfig's disable_compile: no automatic torch.compile of the decode forward.
        [--disable-compile]
    do_sample : bool, default False
        GenerationConfig's do_sample: multinomial sampling after the warpers (default top_k 50).
        [--do-sample]
    temperature : Optional[float], default None
        Sampling temperature (default 1.0: no TemperatureLogitsWarper). [--temperature]
    top_k : Optional[int], default None
        Top-k filtering when sampling (default 50; 0 turns TopKLogitsWarper off). [--top-k]
    top_p : Optional[float], default None
        Nucleus filtering when sampling (default 1.0: none); below 1.0 not modelled yet (CUDA's sort
        scratch is unmeasured). [--top-p]
    min_new_tokens : Optional[int], default None
        Tokens generated before eos may end a row (MinLength/MinNewTokensLength processors).
        [--min-new-tokens]
    num_beams : Optional[int], default None
        Beam search's beams (default 1): `_beam_search`, the cache reordered every step
        GenerationConfig's length_penalty 1.0 and early_stopping False; every step runs to
        --max-new-tokens. With --do-sample: beam sampling (the warpers on the log-probabilities,
        multinomial draws of 2 x beams candidates). [--num-beams]
    num_return_sequences : Optional[int], default None
        Sequences returned per prompt (default 1); with beam search at most --num-beams With
        sampling the batch is repeated this many times before the prefill; with beam search generate
        returns the best num_return_sequences beams of each prompt. [--num-return-sequences]
    context_length : Optional[Union[str, int, float, Sequence[Any]]], default None
        Sequence length(s), comma separated (default: the preset's). [--context-length]
    batch_size : Optional[int], default None
        Batch size B (default: the preset's). [--batch-size]
    warmup_steps : int, default 1
        Steps run before recording (optimizer state exists after one training step).
        [--warmup-steps]
    measure_steps : int, default 1
        Steps recorded into the snapshot. [--measure-steps]
    max_entries : int, default 1000000
        Trace entries the snapshot keeps, as `_record_memory_history(max_entries=…)` A ring buffer
        that drops the oldest entries when full (default: CS336's profile_memory.py value).
        [--max-entries]
    profile_type : Union[Literal['forward', 'forward-loss', 'inference', 'training', 'generate'], Sequence[Literal['forward', 'forward-loss', 'inference', 'training', 'generate']]], default 'training'
        What one step runs; a comma list runs each (a column per type in the peak table) forward:
        `model(x)` with autograd, no loss; forward-loss: the same plus the loss, no backward;
        inference: no_grad; training: the full step; generate (hf models): greedy
        `model.generate(input_ids, max_new_tokens=N, do_sample=False)`. One of: forward,
        forward-loss, inference, training, generate (a list runs each). [--profile-type]
    max_new_tokens : Optional[int], default None
        GenerationConfig's max_new_tokens: the tokens `--profile-type generate` decodes The prompt
        is the context length; the prefill and each decode step are reported with their peaks.
        [--max-new-tokens]
    device : str, default 'cpu'
        cpu (real numerics) or meta (shapes only; any model size). [--device]
    gpu : Optional[Literal['H100-80GB', 'H200-141GB', 'A100-40GB', 'A100-80GB', 'MI250X-64GB', 'MI300X-192GB', 'RTX4090-24GB', 'RTXA6000-48GB']], default None
        GPU whose memory bounds the allocator (names are case-insensitive; a unique prefix such as
        h100 will do). One of: H100-80GB, H200-141GB, A100-40GB, A100-80GB, MI250X-64GB,
        MI300X-192GB, RTX4090-24GB, RTXA6000-48GB. [--gpu]
    memory_limit : Optional[str], default None
        Device memory instead of a --gpu preset (e.g. 24GiB, 80GB). [--memory-limit]
    memory_fraction : Optional[float], default None
        torch.cuda.set_per_process_memory_fraction: the share of the device reserved memory may use
        Needs --gpu or --memory-limit; arms garbage_collection_threshold. [--memory-fraction]
    allocator_conf : Optional[str], default None
        PYTORCH_CUDA_ALLOC_CONF string (default: that environment variable). [--allocator-conf]
    threads : Optional[int], default None
        CPU threads for the cpu device (default: all cores). [--threads]
    seed : int, default 42
        Random seed for the weights and the synthetic data. [--seed]
    grad_accum_steps : int, default 1
        Training: N micro-batches per batch, gradients accumulated before one optimizer step `loss /
        N; loss.backward()` per micro-batch. [--grad-accum-steps]
    flops : bool, default False
        Count FLOPs, bytes moved and arithmetic intensity per op and module Over the measured steps
        (DeepSpeed's FLOPS profiler view); MFU on cpu, a roofline prediction with --gpu. [--flops;
        also enable_deepspeed_flops=]
    flops_depth : int, default 3
        Module depth of the printed FLOP tree. [--flops-depth]

    Returns
    -------
    ProfileResult
    """

def compare(
    model: Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']] = None,
    *,
    config: Any = None,
    flavour: Optional[Literal['cs336', 'tinyllama', 'hf']] = None,
    hidden_dim: Optional[int] = None,
    num_layers: Optional[int] = None,
    num_heads: Optional[int] = None,
    num_kv_heads: Optional[int] = None,
    intermediate_dim: Optional[int] = None,
    vocab_size: Optional[int] = None,
    max_seq_len: Optional[int] = None,
    rope_theta: Optional[float] = None,
    norm_eps: Optional[float] = None,
    attention: Optional[Literal['naive', 'flash']] = None,
    attn_implementation: Optional[Literal['eager', 'sdpa', 'flash_attention_2']] = None,
    sdpa_backend: Optional[Literal['auto', 'flash', 'efficient', 'math', 'cpu_flash', 'cudnn']] = None,
    use_cache: Optional[Literal['true', 'false']] = None,
    logits_to_keep: Optional[int] = None,
    gradient_checkpointing: Optional[Literal['none', 'non-reentrant', 'reentrant']] = None,
    attention_mask: Optional[Literal['none', 'ones']] = None,
    lora_r: Optional[int] = None,
    lora_alpha: Optional[float] = None,
    lora_dropout: Optional[float] = None,
    target_modules: Optional[Literal['all-linear', 'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'w1', 'w3', 'w2', 'gate']] = None,
    target_parameters: Optional[Literal['mlp.gate.weight', 'mlp.router.weight', 'mlp.experts.gate_up_proj', 'mlp.experts.down_proj']] = None,
    lora_bias: Optional[str] = None,
    use_dora: bool = False,
    modules_to_save: Optional[Literal['embed_tokens', 'lm_head']] = None,
    load_in_4bit: bool = False,
    bnb_4bit_quant_type: Optional[Literal['fp4', 'nf4']] = None,
    bnb_4bit_use_double_quant: bool = False,
    bnb_4bit_compute_dtype: Optional[Literal['float32', 'bfloat16', 'float16']] = None,
    bnb_4bit_quant_storage: Optional[Literal['uint8', 'bfloat16', 'float16', 'float32']] = None,
    prepare_model_for_kbit_training: Optional[str] = None,
    load_in_8bit: bool = False,
    llm_int8_threshold: Optional[float] = None,
    experts_implementation: Optional[str] = None,
    routing: Optional[str] = None,
    output_router_logits: bool = False,
    precision: Optional[Literal['fp32', 'bf16', 'fp16', 'pure-bf16']] = None,
    use_mixed_precision: bool = False,
    dtype: Optional[Literal['auto', 'float32', 'bfloat16', 'float16', 'bf16', 'fp16']] = None,
    use_amp: bool = False,
    pure_bf16: bool = False,
    autocast_by: Optional[Literal['accelerate', 'torch']] = None,
    checkpoint: Optional[Literal['none', 'blocks', 'every-N']] = None,
    fusion: Optional[Literal['none', 'all']] = None,
    fused_qkv: bool = False,
    fused_gate_up: bool = False,
    optimizer: Optional[Literal['adamw_torch_fused', 'adamw_torch', 'adamw_torch_forloop', 'sgd', 'adamw_cs336', 'adamw_bnb_8bit', 'paged_adamw_8bit', 'paged_adamw_32bit', 'adafactor']] = None,
    max_grad_norm: Optional[float] = None,
    parallel: Optional[Literal['ddp', 'zero1', 'zero2', 'fsdp', 'hsdp', 'tp']] = None,
    world_size: Optional[int] = None,
    rank: Optional[int] = None,
    gpus_per_node: Optional[int] = None,
    no_reshard_after_forward: bool = False,
    fsdp_param_dtype: Optional[Literal['bf16', 'fp16', 'fp32']] = None,
    fsdp_reduce_dtype: Optional[Literal['bf16', 'fp16', 'fp32']] = None,
    fsdp_unit: Optional[str] = None,
    offload: Optional[Literal['params']] = None,
    tp: Optional[int] = None,
    sequence_parallel: bool = False,
    tp_plan: Optional[Literal['auto', 'torch']] = None,
    cache_implementation: Optional[str] = None,
    disable_compile: bool = False,
    do_sample: bool = False,
    temperature: Optional[float] = None,
    top_k: Optional[int] = None,
    top_p: Optional[float] = None,
    min_new_tokens: Optional[int] = None,
    num_beams: Optional[int] = None,
    num_return_sequences: Optional[int] = None,
    context_length: Optional[Union[str, int, float, Sequence[Any]]] = None,
    batch_size: Optional[int] = None,
    warmup_steps: int = 1,
    measure_steps: int = 1,
    max_entries: int = 1000000,
    profile_type: Union[Literal['forward', 'forward-loss', 'inference', 'training', 'generate'], Sequence[Literal['forward', 'forward-loss', 'inference', 'training', 'generate']]] = 'training',
    max_new_tokens: Optional[int] = None,
    device: str = 'cpu',
    gpu: Optional[Literal['H100-80GB', 'H200-141GB', 'A100-40GB', 'A100-80GB', 'MI250X-64GB', 'MI300X-192GB', 'RTX4090-24GB', 'RTXA6000-48GB']] = None,
    memory_limit: Optional[str] = None,
    memory_fraction: Optional[float] = None,
    allocator_conf: Optional[str] = None,
    out_dir: Optional[Union[str, PathLike[str]]] = None,
    threads: Optional[int] = None,
    seed: int = 42,
    grad_accum_steps: int = 1,
    flops: bool = False,
    flops_depth: int = 3,
) -> JobResult:
    """``vramscope profile --compare``: Profile memory like CS336's profile_memory.py: snapshot,
    summary, peak table.

    ``vramscope profile --compare``: the baseline and each memory option (or each layout with
    ``world_size=``) side by side; compare.json's rows, its tables as ``data['markdown']``.
    ``out_dir=`` writes each variant's snapshot and report there (default: nothing is written).

    Keywords are the command's flags in Python spelling (``context_length=512`` is
    ``--context-length 512``, ``flops=True`` is ``--flops``, a list is a comma list); defaults and
    checks are the command line's. An unknown keyword raises TypeError, a bad value ValueError.

    Parameters
    ----------
    model : Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']], default None
        Model preset (the names below; a cs336-/tinyllama-/hf- prefix is accepted on any) small,
        medium and large exist in both cs336 and tinyllama: a bare name takes the command's seed's
        (profile, sweep, fit, estimate, run-all: CS336's; train, study: the workshop's); cs336-NAME
        / tinyllama-NAME or --flavour choose explicitly. Names are case-insensitive. One of:
        cs336-small, cs336-medium, cs336-large, xl, 2.7B, walkthrough, script, tiny,
        tinyllama-small, tinyllama-medium, tinyllama-large, very_large, Llama-3.2-1B, Llama-3.1-8B,
        Llama-3.1-70B, Mistral-7B, Qwen2.5-7B, Qwen3-8B, Phi-3-mini, OLMo-2-7B, Gemma-2-9B,
        Gemma-3-27B, Mixtral-8x7B, Qwen3-30B-A3B, gpt-oss-20b, gpt-oss-120b, DeepSeek-V3,
        Mistral-7B-v0.3. [--preset; also model_size=, preset=]
    config : Any, default None
        A Hugging Face config.json (or a model folder holding one) instead of a preset Only
        config.json is read: model_type llama, mistral, qwen2, qwen3, phi3, olmo2, gemma2,
        gemma3_text, mixtral, qwen3_moe, qwen2_moe, gpt_oss or deepseek_v3, run as transformers
        5.23.0's modeling code (the hf flavour), with that release's config defaults. Its
        torch_dtype is the weights' type, as from_pretrained(dtype="auto") loads them (--dtype
        overrides it). Shape flags override it; --flavour cs336|tinyllama maps a plain llama shape
        onto those flavours. Also a dict (a config.json's content) or a transformers
        ``PretrainedConfig`` (anything with ``to_dict()``). [--config]
    flavour : Optional[Literal['cs336', 'tinyllama', 'hf']], default None
        Reference implementation to reproduce. One of: cs336, tinyllama, hf. [--flavour]
    hidden_dim : Optional[int], default None
        Hidden size d_model. [--hidden-dim]
    num_layers : Optional[int], default None
        Transformer layers (also the workshop guide's --n-layers). [--num-layers; also n_layers=]
    num_heads : Optional[int], default None
        Attention heads (also --n-heads). [--num-heads; also n_heads=]
    num_kv_heads : Optional[int], default None
        Key/value heads (grouped-query attention when fewer than --num-heads; also --n-kv-heads).
        [--num-kv-heads; also n_kv_heads=]
    intermediate_dim : Optional[int], default None
        Feed-forward size d_ff. [--intermediate-dim]
    vocab_size : Optional[int], default None
        Vocabulary size (rows of the embedding and the LM head). [--vocab-size]
    max_seq_len : Optional[int], default None
        Longest sequence the model accepts (sizes cs336's RoPE buffer) Default: the preset's, raised
        to the run's sequence length as both seed scripts do. [--max-seq-len]
    rope_theta : Optional[float], default None
        RoPE base frequency theta. [--rope-theta]
    norm_eps : Optional[float], default None
        RMSNorm epsilon. [--norm-eps]
    attention : Optional[Literal['naive', 'flash']], default None
        Attention computation (cs336 and tinyllama flavours). One of: naive, flash. [--attention]
    attn_implementation : Optional[Literal['eager', 'sdpa', 'flash_attention_2']], default None
        hf flavour: transformers' attn_implementation (default sdpa, as transformers'). One of:
        eager, sdpa, flash_attention_2. [--attn-implementation]
    sdpa_backend : Optional[Literal['auto', 'flash', 'efficient', 'math', 'cpu_flash', 'cudnn']], default None
        hf flavour, sdpa: the kernel F.scaled_dot_product_attention runs on CUDA auto (the default)
        is what PyTorch 2.11 picks for the dtype, mask and GPU (cuDNN attention for fp16/bf16 on an
        H100/H200 --gpu, else flash); it is printed with the run. One of: auto, flash, efficient,
        math, cpu_flash, cudnn. [--sdpa-backend]
    use_cache : Optional[Literal['true', 'false']], default None
        hf flavour: use_cache true|false (default: the config's) true for every shipped preset: a
        forward fills a DynamicCache with each layer's keys and values. One of: true, false.
        [--use-cache]
    logits_to_keep : Optional[int], default None
        hf flavour: logits_to_keep: the LM head runs on the last N positions only (0: all)
        transformers' loss needs every position, so N < the context is for inference.
        [--logits-to-keep]
    gradient_checkpointing : Optional[Literal['none', 'non-reentrant', 'reentrant']], default None
        hf flavour: gradient_checkpointing_enable(): none, non-reentrant or reentrant non-reentrant
        is use_reentrant=False, the same as --checkpoint blocks. One of: none, non-reentrant,
        reentrant. [--gradient-checkpointing]
    attention_mask : Optional[Literal['none', 'ones']], default None
        hf flavour: the attention_mask passed with the batch: none (the default) or ones ones is
        what an unpadded tokenizer batch carries. One of: none, ones. [--attention-mask]
    lora_r : Optional[int], default None
        hf flavour, peft LoraConfig's r: turns LoRA on get_peft_model over the loaded model: base
        weights frozen, fp32 adapters lora_A/lora_B trained. [--lora-r]
    lora_alpha : Optional[float], default None
        LoraConfig's lora_alpha (peft's default 8; scaling = alpha / r). [--lora-alpha]
    lora_dropout : Optional[float], default None
        LoraConfig's lora_dropout on the adapters' input in training (peft's default 0.0).
        [--lora-dropout]
    target_modules : Optional[Literal['all-linear', 'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'w1', 'w3', 'w2', 'gate']], default None
        LoraConfig's target_modules: all-linear, or a comma list of modules peft's default is
        q_proj,v_proj for llama, mistral, qwen2, qwen3, gemma2 and gemma3_text; phi3, olmo2 and the
        mixture-of-experts types need them named (Phi-3's are qkv_proj, o_proj, gate_up_proj,
        down_proj; an MoE model's adaptable linears are its attention's). On mixtral, qwen3_moe and
        deepseek_v3 peft converts the transformers-4 names of the experts and the router (mixtral:
        w1, w3, w2, gate; the others: gate_proj, up_proj, down_proj, gate), all-linear included,
        into --target-parameters, with r and lora_alpha doubled on gate_up_proj (both of its halves
        must be named). One of: all-linear, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
        down_proj, qkv_proj, gate_up_proj, w1, w3, w2, gate. [--target-modules]
    target_parameters : Optional[Literal['mlp.gate.weight', 'mlp.router.weight', 'mlp.experts.gate_up_proj', 'mlp.experts.down_proj']], default None
        LoraConfig's target_parameters: a comma list of a sparse MoE block's parameters peft's
        ParamWrapper (one LoRA per expert) on mlp.experts.gate_up_proj, mlp.experts.down_proj and
        the router's mlp.gate.weight (gpt_oss: mlp.router.weight; matched by suffix as peft matches
        them). Without --target-modules no module is adapted. One of: mlp.gate.weight,
        mlp.router.weight, mlp.experts.gate_up_proj, mlp.experts.down_proj. [--target-parameters]
    lora_bias : Optional[str], default None
        LoraConfig's bias: none (peft's default), all or lora_only all: every bias of the model
        trains; lora_only: the adapted projections' biases train. [--lora-bias]
    use_dora : bool, default False
        LoraConfig's use_dora: DoRA (weight-decomposed LoRA) on the adapted projections A trainable
        fp32 magnitude per output feature; every forward rebuilds the adapter's dense update and the
        weight's row norms (a 4-bit weight is dequantized for it). [--use-dora]
    modules_to_save : Optional[Literal['embed_tokens', 'lm_head']], default None
        LoraConfig's modules_to_save: a comma list of embed_tokens and lm_head peft's
        ModulesToSaveWrapper: the original module kept frozen and a trainable deep copy in its dtype
        (after prepare_model_for_kbit_training's fp32 cast under 4-bit), with its gradient and
        optimizer state. On a model with tied embeddings the copy unties them (peft warns): the
        other end keeps the frozen original. One of: embed_tokens, lm_head. [--modules-to-save]
    load_in_4bit : bool, default False
        hf flavour, BitsAndBytesConfig's load_in_4bit (QLoRA with --lora-r) Every decoder linear is
        stored in 4 bits by bitsandbytes (lm_head, embedding and norms unquantized).
        [--load-in-4bit]
    bnb_4bit_quant_type : Optional[Literal['fp4', 'nf4']], default None
        BitsAndBytesConfig's bnb_4bit_quant_type: fp4 (bitsandbytes' default) or nf4. One of: fp4,
        nf4. [--bnb-4bit-quant-type]
    bnb_4bit_use_double_quant : bool, default False
        BitsAndBytesConfig's bnb_4bit_use_double_quant 8-bit block scales, one fp32 scale per 256
        blocks. [--bnb-4bit-use-double-quant]
    bnb_4bit_compute_dtype : Optional[Literal['float32', 'bfloat16', 'float16']], default None
        BitsAndBytesConfig's bnb_4bit_compute_dtype: float32 (the default), bfloat16 or float16. One
        of: float32, bfloat16, float16. [--bnb-4bit-compute-dtype]
    bnb_4bit_quant_storage : Optional[Literal['uint8', 'bfloat16', 'float16', 'float32']], default None
        BitsAndBytesConfig's bnb_4bit_quant_storage: uint8 (the default), or the compute dtype for
        FSDP-QLoRA (the same packed bytes). One of: uint8, bfloat16, float16, float32.
        [--bnb-4bit-quant-storage]
    prepare_model_for_kbit_training : Optional[str], default None
        peft's prepare_model_for_kbit_training on the 4-bit or 8-bit model: true (the default; false
        with --profile-type generate) or false QLoRA recipes call it: unquantized parameters cast to
        fp32, gradient checkpointing with its reentrant default. An inference script does not, so
        generate() runs the model as from_pretrained loads it unless this is given.
        [--prepare-model-for-kbit-training]
    load_in_8bit : bool, default False
        hf flavour, BitsAndBytesConfig's load_in_8bit: LLM.int8() (LoRA with --lora-r) Every decoder
        linear is a bitsandbytes Linear8bitLt: int8 weights with an fp32 scale per row (lm_head,
        embedding and norms unquantized); inputs quantized to int8 per row. [--load-in-8bit]
    llm_int8_threshold : Optional[float], default None
        BitsAndBytesConfig's llm_int8_threshold (default 6.0; 0 turns the outlier split off) With a
        threshold, input columns holding |x| >= it would be multiplied in 16 bits; vramscope counts
        no such column (a normalized input rarely has one). [--llm-int8-threshold]
    experts_implementation : Optional[str], default None
        hf flavour, mixture of experts: transformers' experts_implementation: grouped_mm (the
        default), batched_mm or eager grouped_mm sorts the tokens by expert and runs two grouped
        matmuls; batched_mm gathers each token's expert weights and runs a bmm; eager loops over the
        experts that were hit. [--experts-implementation]
    routing : Optional[str], default None
        hf flavour, mixture of experts: how many tokens each expert gets: balanced (the default),
        worst, or a file of per-expert counts balanced splits the tokens evenly; worst sends every
        token to the same top-k experts; a file holds one count per expert (whitespace or commas)
        adding up to tokens × top-k, where tokens is batch × context. [--routing]
    output_router_logits : bool, default False
        hf flavour, mixture of experts: transformers' output_router_logits: keep every router's
        logits and add the router's auxiliary loss Mixtral, Qwen3-MoE, Qwen2-MoE and gpt-oss:
        load_balancing_loss_func runs on the kept logits in every profile type (transformers
        computes it without labels too), and training adds router_aux_loss_coef (the config's, 0.001
        by default) times it to the loss. DeepSeek-V3 has no such loss. [--output-router-logits]
    precision : Optional[Literal['fp32', 'bf16', 'fp16', 'pure-bf16']], default None
        Training precision (default fp32) bf16: autocast to bf16 around forward and loss; fp16:
        autocast to fp16 with a dynamic loss scaler — parameters, gradients and optimizer state stay
        fp32 — or pure-bf16 (= --pure-bf16). One of: fp32, bf16, fp16, pure-bf16. [--precision]
    use_mixed_precision : bool, default False
        CS336 spelling of autocast: with --dtype bf16 (default) or fp16. [--use-mixed-precision]
    dtype : Optional[Literal['auto', 'float32', 'bfloat16', 'float16', 'bf16', 'fp16']], default None
        hf flavour: from_pretrained's dtype; with --use-mixed-precision: the autocast type auto (the
        default, as in transformers 5: the config's torch_dtype, bfloat16 for every hf preset;
        float32 when it names none), float32, bfloat16 or float16. With --use-mixed-precision:
        CS336's autocast type, bf16 or fp16. One of: auto, float32, bfloat16, float16, bf16, fp16.
        [--dtype]
    use_amp : bool, default False
        The workshop's spelling: fp16 autocast with a GradScaler. [--use-amp]
    pure_bf16 : bool, default False
        Parameters, gradients and optimizer state in bf16 (`model.to(torch.bfloat16)`), no autocast.
        [--pure-bf16]
    autocast_by : Optional[Literal['accelerate', 'torch']], default None
        Who applies the autocast, hf flavour: accelerate (default) or torch. accelerate is the
        Trainer's bf16=True/fp16=True (or `Accelerator(mixed_precision=...)`): `prepare_model` wraps
        the model's forward in autocast and `convert_outputs_to_fp32`, so the output's bf16/fp16
        tensors (the logits, an MoE model's router logits) get an fp32 copy that lives until
        compute_loss drops the output (training and forward-loss). torch is your own loop's `with
        torch.autocast(...)` around the model call, no conversion. The cs336 and tinyllama flavours
        run their scripts' plain torch.autocast. One of: accelerate, torch. [--autocast-by]
    checkpoint : Optional[Literal['none', 'blocks', 'every-N']], default None
        Activation checkpointing: none, blocks or every-N torch.utils.checkpoint with
        use_reentrant=False, on every decoder block (blocks) or on blocks 0, N, 2N, … (every-N). One
        of: none, blocks, every-N. [--checkpoint]
    fusion : Optional[Literal['none', 'all']], default None
        Projection fusions of the workshop's version 2: none or all all is --fused-qkv and
        --fused-gate-up; its flash attention is --attention flash. One of: none, all. [--fusion]
    fused_qkv : bool, default False
        One QKV projection whose output is split into Q, K, V views. [--fused-qkv]
    fused_gate_up : bool, default False
        One gate/up projection whose output is chunked into two views. [--fused-gate-up]
    optimizer : Optional[Literal['adamw_torch_fused', 'adamw_torch', 'adamw_torch_forloop', 'sgd', 'adamw_cs336', 'adamw_bnb_8bit', 'paged_adamw_8bit', 'paged_adamw_32bit', 'adafactor']], default None
        Optimizer implementation, in the Trainer's `optim` names (default: the flavour's) The
        flavour's reference is the default: cs336 adamw_cs336, tinyllama adamw_torch, hf
        adamw_torch_fused (the Trainer's default). adamw_torch_foreach is adamw_torch and adamw_8bit
        is adamw_bnb_8bit; bitsandbytes' optimizers need --device meta. One of: adamw_torch_fused,
        adamw_torch, adamw_torch_forloop, sgd, adamw_cs336, adamw_bnb_8bit, paged_adamw_8bit,
        paged_adamw_32bit, adafactor. [--optimizer]
    max_grad_norm : Optional[float], default None
        clip_grad_norm_(params, X) before each optimizer step; 0 = off
        torch.nn.utils.clip_grad_norm_; the hf flavour's Trainer still computes the norm, with
        max_norm inf, to log it. Default: the flavour's: 1.0 for hf (the Trainer's max_grad_norm),
        off for cs336 and tinyllama. [--max-grad-norm]
    parallel : Optional[Literal['ddp', 'zero1', 'zero2', 'fsdp', 'hsdp', 'tp']], default None
        Simulate one rank of a parallel job with this layout (needs --world-size). One of: ddp,
        zero1, zero2, fsdp, hsdp, tp. [--parallel]
    world_size : Optional[int], default None
        Ranks in the job (with --parallel). [--world-size]
    rank : Optional[int], default None
        Profile only this rank (default: rank 0 and every rank whose shard sizes differ). [--rank]
    gpus_per_node : Optional[int], default None
        hsdp: ranks per node, the shard group (default 8). [--gpus-per-node]
    no_reshard_after_forward : bool, default False
        fsdp/hsdp: keep each block's unsharded parameters from forward to backward
        fully_shard(reshard_after_forward=False), ZeRO-2-like. [--no-reshard-after-forward]
    fsdp_param_dtype : Optional[Literal['bf16', 'fp16', 'fp32']], default None
        fsdp/hsdp: MixedPrecisionPolicy(param_dtype=...): bf16, fp16 or fp32. One of: bf16, fp16,
        fp32. [--fsdp-param-dtype]
    fsdp_reduce_dtype : Optional[Literal['bf16', 'fp16', 'fp32']], default None
        fsdp/hsdp: MixedPrecisionPolicy(reduce_dtype=...): bf16, fp16 or fp32. One of: bf16, fp16,
        fp32. [--fsdp-reduce-dtype]
    fsdp_unit : Optional[str], default None
        zero2/fsdp/hsdp units: block (the default), every-N or root block: fully_shard on each
        decoder block, then the root; every-N: on each group of N consecutive blocks; root:
        fully_shard(model) alone, every parameter gathered at once. [--fsdp-unit]
    offload : Optional[Literal['params']], default None
        params: FSDP2's CPUOffloadPolicy Sharded parameters, gradients and the optimizer step on the
        host; host memory is reported separately. One of: params. [--offload]
    tp : Optional[int], default None
        Tensor-parallel ranks (hf flavour) torch's Megatron-style plan (q/k/v/gate/up
        ColwiseParallel, o/down RowwiseParallel, vocabulary-parallel embedding, head gathered) on
        Llama-style models, transformers' own on phi3, olmo2, gemma2, gemma3_text and the MoE models
        but gpt-oss (their experts under moe_tp_experts; --tp-plan). With --parallel fsdp or zero2:
        a (world-size / N, N) mesh, FSDP2 over the first dimension (2-D); --parallel tp: N =
        --world-size. [--tp]
    sequence_parallel : bool, default False
        With --parallel tp: torch's SequenceParallel plan too Norms and the residual stream on S / N
        positions, hidden states all-gathered before attention, the MLP and the head; the batch
        passes position_ids. [--sequence-parallel]
    tp_plan : Optional[Literal['auto', 'torch']], default None
        With --tp: whose plan shards the model, auto or torch auto: transformers' own
        (from_pretrained(tp_plan="auto"): the config's base_model_tp_plan, the embedding
        vocabulary-parallel, the head gathered), the only plan on phi3, olmo2, gemma2, gemma3_text,
        mixtral, qwen3_moe, qwen2_moe and deepseek_v3 (the experts' packed_colwise gate_up and
        rowwise down under moe_tp_experts); torch: the Megatron-style plan above, the default on
        Llama-style models. One of: auto, torch. [--tp-plan]
    cache_implementation : Optional[str], default None
        generate's cache_implementation: dynamic (DynamicCache, the default) or static static:
        StaticCache, max_new_tokens + prompt - 1 positions per layer allocated at the prefill and
        written in place (a sliding layer of Gemma 2/3, gpt-oss, Mistral, Mixtral, Phi-3, Qwen2,
        Qwen3 or Qwen3-MoE: at most its window, rolled once full; DeepSeek-V3: its latent and
        k_rot); needs --disable-compile (on CUDA transformers otherwise compiles the decode forward,
        which is not modelled). offloaded is not modelled. [--cache-implementation]
    disable_compile : bool, default False
        GenerationConfig's disable_compile: no automatic torch.compile of the decode forward.
        [--disable-compile]
    do_sample : bool, default False
        GenerationConfig's do_sample: multinomial sampling after the warpers (default top_k 50).
        [--do-sample]
    temperature : Optional[float], default None
        Sampling temperature (default 1.0: no TemperatureLogitsWarper). [--temperature]
    top_k : Optional[int], default None
        Top-k filtering when sampling (default 50; 0 turns TopKLogitsWarper off). [--top-k]
    top_p : Optional[float], default None
        Nucleus filtering when sampling (default 1.0: none); below 1.0 not modelled yet (CUDA's sort
        scratch is unmeasured). [--top-p]
    min_new_tokens : Optional[int], default None
        Tokens generated before eos may end a row (MinLength/MinNewTokensLength processors).
        [--min-new-tokens]
    num_beams : Optional[int], default None
        Beam search's beams (default 1): `_beam_search`, the cache reordered every step
        GenerationConfig's length_penalty 1.0 and early_stopping False; every step runs to
        --max-new-tokens. With --do-sample: beam sampling (the warpers on the log-probabilities,
        multinomial draws of 2 x beams candidates). [--num-beams]
    num_return_sequences : Optional[int], default None
        Sequences returned per prompt (default 1); with beam search at most --num-beams With
        sampling the batch is repeated this many times before the prefill; with beam search generate
        returns the best num_return_sequences beams of each prompt. [--num-return-sequences]
    context_length : Optional[Union[str, int, float, Sequence[Any]]], default None
        Sequence length(s), comma separated (default: the preset's). [--context-length]
    batch_size : Optional[int], default None
        Batch size B (default: the preset's). [--batch-size]
    warmup_steps : int, default 1
        Steps run before recording (optimizer state exists after one training step).
        [--warmup-steps]
    measure_steps : int, default 1
        Steps recorded into the snapshot. [--measure-steps]
    max_entries : int, default 1000000
        Trace entries the snapshot keeps, as `_record_memory_history(max_entries=…)` A ring buffer
        that drops the oldest entries when full (default: CS336's profile_memory.py value).
        [--max-entries]
    profile_type : Union[Literal['forward', 'forward-loss', 'inference', 'training', 'generate'], Sequence[Literal['forward', 'forward-loss', 'inference', 'training', 'generate']]], default 'training'
        What one step runs; a comma list runs each (a column per type in the peak table) forward:
        `model(x)` with autograd, no loss; forward-loss: the same plus the loss, no backward;
        inference: no_grad; training: the full step; generate (hf models): greedy
        `model.generate(input_ids, max_new_tokens=N, do_sample=False)`. One of: forward,
        forward-loss, inference, training, generate (a list runs each). [--profile-type]
    max_new_tokens : Optional[int], default None
        GenerationConfig's max_new_tokens: the tokens `--profile-type generate` decodes The prompt
        is the context length; the prefill and each decode step are reported with their peaks.
        [--max-new-tokens]
    device : str, default 'cpu'
        cpu (real numerics) or meta (shapes only; any model size). [--device]
    gpu : Optional[Literal['H100-80GB', 'H200-141GB', 'A100-40GB', 'A100-80GB', 'MI250X-64GB', 'MI300X-192GB', 'RTX4090-24GB', 'RTXA6000-48GB']], default None
        GPU whose memory bounds the allocator (names are case-insensitive; a unique prefix such as
        h100 will do). One of: H100-80GB, H200-141GB, A100-40GB, A100-80GB, MI250X-64GB,
        MI300X-192GB, RTX4090-24GB, RTXA6000-48GB. [--gpu]
    memory_limit : Optional[str], default None
        Device memory instead of a --gpu preset (e.g. 24GiB, 80GB). [--memory-limit]
    memory_fraction : Optional[float], default None
        torch.cuda.set_per_process_memory_fraction: the share of the device reserved memory may use
        Needs --gpu or --memory-limit; arms garbage_collection_threshold. [--memory-fraction]
    allocator_conf : Optional[str], default None
        PYTORCH_CUDA_ALLOC_CONF string (default: that environment variable). [--allocator-conf]
    out_dir : Optional[Union[str, PathLike[str]]], default None
        Folder each variant's snapshot and HTML report are written to (created if missing); default:
        nothing is written. [--out-dir]
    threads : Optional[int], default None
        CPU threads for the cpu device (default: all cores). [--threads]
    seed : int, default 42
        Random seed for the weights and the synthetic data. [--seed]
    grad_accum_steps : int, default 1
        Training: N micro-batches per batch, gradients accumulated before one optimizer step `loss /
        N; loss.backward()` per micro-batch. [--grad-accum-steps]
    flops : bool, default False
        Count FLOPs, bytes moved and arithmetic intensity per op and module Over the measured steps
        (DeepSpeed's FLOPS profiler view); MFU on cpu, a roofline prediction with --gpu. [--flops;
        also enable_deepspeed_flops=]
    flops_depth : int, default 3
        Module depth of the printed FLOP tree. [--flops-depth]

    Returns
    -------
    JobResult
    """

def sweep(
    model: Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']] = None,
    *,
    config: Any = None,
    flavour: Optional[Literal['cs336', 'tinyllama', 'hf']] = None,
    hidden_dim: Optional[Union[str, int, float, Sequence[Any]]] = None,
    num_layers: Optional[Union[str, int, float, Sequence[Any]]] = None,
    num_heads: Optional[Union[str, int, float, Sequence[Any]]] = None,
    num_kv_heads: Optional[Union[str, int, float, Sequence[Any]]] = None,
    intermediate_dim: Optional[Union[str, int, float, Sequence[Any]]] = None,
    vocab_size: Optional[Union[str, int, float, Sequence[Any]]] = None,
    max_seq_len: Optional[Union[str, int, float, Sequence[Any]]] = None,
    rope_theta: Optional[Union[str, int, float, Sequence[Any]]] = None,
    attention: Optional[Literal['naive', 'flash']] = None,
    batch_size: Optional[Union[str, int, float, Sequence[Any]]] = None,
    context_length: Optional[Union[str, int, float, Sequence[Any]]] = None,
    points: Optional[Union[str, int, float, Sequence[Any]]] = None,
    profile_type: Optional[Union[str, int, float, Sequence[Any]]] = None,
    max_new_tokens: Optional[Union[str, int, float, Sequence[Any]]] = None,
    grad_accum_steps: Optional[Union[str, int, float, Sequence[Any]]] = None,
    precision: Optional[Literal['fp32', 'bf16', 'fp16', 'pure-bf16']] = None,
    checkpoint: Optional[Literal['none', 'blocks', 'every-N']] = None,
    fusion: Optional[Literal['none', 'all']] = None,
    optimizer: Optional[Literal['adamw_torch_fused', 'adamw_torch', 'adamw_torch_forloop', 'sgd', 'adamw_cs336', 'adamw_bnb_8bit', 'paged_adamw_8bit', 'paged_adamw_32bit', 'adafactor']] = None,
    max_grad_norm: Optional[Union[str, int, float, Sequence[Any]]] = None,
    dtype: Optional[Literal['auto', 'float32', 'bfloat16', 'float16', 'bf16', 'fp16']] = None,
    attn_implementation: Optional[Literal['eager', 'sdpa', 'flash_attention_2']] = None,
    gradient_checkpointing: Optional[Union[str, int, float, Sequence[Any]]] = None,
    lora_r: Optional[Union[str, int, float, Sequence[Any]]] = None,
    lora_alpha: Optional[Union[str, int, float, Sequence[Any]]] = None,
    lora_dropout: Optional[Union[str, int, float, Sequence[Any]]] = None,
    target_modules: Optional[Literal['all-linear', 'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'w1', 'w3', 'w2', 'gate']] = None,
    use_dora: bool = False,
    modules_to_save: Optional[Literal['embed_tokens', 'lm_head']] = None,
    load_in_4bit: bool = False,
    load_in_8bit: bool = False,
    llm_int8_threshold: Optional[Union[str, int, float, Sequence[Any]]] = None,
    bnb_4bit_use_double_quant: bool = False,
    bnb_4bit_quant_type: Optional[Literal['fp4', 'nf4']] = None,
    bnb_4bit_compute_dtype: Optional[Literal['float32', 'bfloat16', 'float16']] = None,
    parallel: Optional[Literal['ddp', 'zero1', 'zero2', 'fsdp', 'hsdp', 'tp']] = None,
    world_size: Optional[Union[str, int, float, Sequence[Any]]] = None,
    gpus_per_node: Optional[Union[str, int, float, Sequence[Any]]] = None,
    fsdp_param_dtype: Optional[Union[str, int, float, Sequence[Any]]] = None,
    fsdp_reduce_dtype: Optional[Union[str, int, float, Sequence[Any]]] = None,
    fsdp_unit: Optional[Union[str, int, float, Sequence[Any]]] = None,
    warmup_steps: Optional[Union[str, int, float, Sequence[Any]]] = None,
    measure_steps: Optional[Union[str, int, float, Sequence[Any]]] = None,
    gpu: Optional[Literal['H100-80GB', 'H200-141GB', 'A100-40GB', 'A100-80GB', 'MI250X-64GB', 'MI300X-192GB', 'RTX4090-24GB', 'RTXA6000-48GB']] = None,
    memory_limit: Optional[Union[str, int, float, Sequence[Any]]] = None,
    memory_fraction: Optional[Union[str, int, float, Sequence[Any]]] = None,
    allocator_conf: Optional[Union[str, int, float, Sequence[Any]]] = None,
    seed: Optional[Union[str, int, float, Sequence[Any]]] = None,
    device: str = 'meta',
    snapshots: bool = False,
    out_dir: Optional[Union[str, PathLike[str]]] = None,
    threads: Optional[int] = None,
) -> JobResult:
    """``vramscope sweep``: Profile runs over the grid of comma lists given to profile flags: CSV,
    JSON, Markdown, SVG plots and scaling fits (memory vs batch size and sequence length).

    Profiles over the grid of comma lists given as keywords (``batch_size=[1, 2, 4]``); sweep.json
    with its points and scaling fits. ``out_dir=`` writes its JSON, CSV, Markdown and plots there,
    and with ``snapshots=True`` each point's files (default: nothing is written).

    Keywords are the command's flags in Python spelling (``context_length=512`` is
    ``--context-length 512``, ``flops=True`` is ``--flops``, a list is a comma list); defaults and
    checks are the command line's. An unknown keyword raises TypeError, a bad value ValueError.

    Parameters
    ----------
    model : Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']], default None
        Model preset(s) (as `profile --model`), comma separated. One of: cs336-small, cs336-medium,
        cs336-large, xl, 2.7B, walkthrough, script, tiny, tinyllama-small, tinyllama-medium,
        tinyllama-large, very_large, Llama-3.2-1B, Llama-3.1-8B, Llama-3.1-70B, Mistral-7B,
        Qwen2.5-7B, Qwen3-8B, Phi-3-mini, OLMo-2-7B, Gemma-2-9B, Gemma-3-27B, Mixtral-8x7B,
        Qwen3-30B-A3B, gpt-oss-20b, gpt-oss-120b, DeepSeek-V3, Mistral-7B-v0.3. [--preset; also
        model_size=, preset=]
    config : Any, default None
        Hugging Face config.json file(s), comma separated. Also a dict (a config.json's content) or
        a transformers ``PretrainedConfig`` (anything with ``to_dict()``). [--config]
    flavour : Optional[Literal['cs336', 'tinyllama', 'hf']], default None
        Reference implementation(s) to reproduce. One of: cs336, tinyllama, hf. [--flavour]
    hidden_dim : Optional[Union[str, int, float, Sequence[Any]]], default None
        Hidden size d_model (a comma list sweeps it). [--hidden-dim]
    num_layers : Optional[Union[str, int, float, Sequence[Any]]], default None
        Number of decoder blocks (layers). [--num-layers]
    num_heads : Optional[Union[str, int, float, Sequence[Any]]], default None
        Attention heads (must divide --hidden-dim). [--num-heads]
    num_kv_heads : Optional[Union[str, int, float, Sequence[Any]]], default None
        Key/value heads (grouped-query attention when fewer than --num-heads). [--num-kv-heads]
    intermediate_dim : Optional[Union[str, int, float, Sequence[Any]]], default None
        Feed-forward size d_ff. [--intermediate-dim]
    vocab_size : Optional[Union[str, int, float, Sequence[Any]]], default None
        Vocabulary size (rows of the embedding and the LM head). [--vocab-size]
    max_seq_len : Optional[Union[str, int, float, Sequence[Any]]], default None
        Longest sequence the model accepts (sizes RoPE tables). [--max-seq-len]
    rope_theta : Optional[Union[str, int, float, Sequence[Any]]], default None
        RoPE base frequency theta. [--rope-theta]
    attention : Optional[Literal['naive', 'flash']], default None
        Attention computation(s). One of: naive, flash. [--attention]
    batch_size : Optional[Union[str, int, float, Sequence[Any]]], default None
        Batch size(s), comma-separated: one profile per value. [--batch-size]
    context_length : Optional[Union[str, int, float, Sequence[Any]]], default None
        Sequence length(s) to profile, comma-separated. [--context-length; also seq_len=]
    points : Optional[Union[str, int, float, Sequence[Any]]], default None
        (batch size, context length) points instead of the --batch-size × --context-length grid E.g.
        `4:512,16:128`: context 512 at batch 4 beside context 128 at batch 16; crossed with the
        other axes' lists. [--points]
    profile_type : Optional[Union[str, int, float, Sequence[Any]]], default None
        forward, inference, training and/or generate (default: training). [--profile-type]
    max_new_tokens : Optional[Union[str, int, float, Sequence[Any]]], default None
        generate()'s max_new_tokens (with --profile-type generate), comma-separated.
        [--max-new-tokens]
    grad_accum_steps : Optional[Union[str, int, float, Sequence[Any]]], default None
        Micro-batches per optimizer step (gradient accumulation). [--grad-accum-steps]
    precision : Optional[Literal['fp32', 'bf16', 'fp16', 'pure-bf16']], default None
        Precision(s) (as `profile --precision`). One of: fp32, bf16, fp16, pure-bf16. [--precision]
    checkpoint : Optional[Literal['none', 'blocks', 'every-N']], default None
        none, blocks and/or every-N. One of: none, blocks, every-N. [--checkpoint]
    fusion : Optional[Literal['none', 'all']], default None
        none and/or all. One of: none, all. [--fusion]
    optimizer : Optional[Literal['adamw_torch_fused', 'adamw_torch', 'adamw_torch_forloop', 'sgd', 'adamw_cs336', 'adamw_bnb_8bit', 'paged_adamw_8bit', 'paged_adamw_32bit', 'adafactor']], default None
        Optimizer implementation(s) of the training step (as `profile --optimizer`). One of:
        adamw_torch_fused, adamw_torch, adamw_torch_forloop, sgd, adamw_cs336, adamw_bnb_8bit,
        paged_adamw_8bit, paged_adamw_32bit, adafactor. [--optimizer]
    max_grad_norm : Optional[Union[str, int, float, Sequence[Any]]], default None
        clip_grad_norm_ max norm(s) before the step (as `profile --max-grad-norm`; 0 = off).
        [--max-grad-norm]
    dtype : Optional[Literal['auto', 'float32', 'bfloat16', 'float16', 'bf16', 'fp16']], default None
        hf flavour: from_pretrained's dtype(s) (auto, float32, bfloat16, float16). One of: auto,
        float32, bfloat16, float16, bf16, fp16. [--dtype]
    attn_implementation : Optional[Literal['eager', 'sdpa', 'flash_attention_2']], default None
        hf flavour: attn_implementation(s). One of: eager, sdpa, flash_attention_2.
        [--attn-implementation]
    gradient_checkpointing : Optional[Union[str, int, float, Sequence[Any]]], default None
        hf flavour: gradient checkpointing mode(s) (none, non-reentrant, reentrant).
        [--gradient-checkpointing]
    lora_r : Optional[Union[str, int, float, Sequence[Any]]], default None
        hf flavour, peft LoRA rank(s) (turns LoRA on). [--lora-r]
    lora_alpha : Optional[Union[str, int, float, Sequence[Any]]], default None
        LoRA alpha(s). [--lora-alpha]
    lora_dropout : Optional[Union[str, int, float, Sequence[Any]]], default None
        LoRA dropout(s). [--lora-dropout]
    target_modules : Optional[Literal['all-linear', 'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'w1', 'w3', 'w2', 'gate']], default None
        LoRA target_modules value(s), separated by ';' (a value is all-linear or a comma list). One
        of: all-linear, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, qkv_proj,
        gate_up_proj, w1, w3, w2, gate. [--target-modules]
    use_dora : bool, default False
        Every point's LoRA is DoRA (LoraConfig's use_dora; needs --lora-r). [--use-dora]
    modules_to_save : Optional[Literal['embed_tokens', 'lm_head']], default None
        LoRA modules_to_save value(s), separated by ';' (a value is a comma list of embed_tokens and
        lm_head). One of: embed_tokens, lm_head. [--modules-to-save]
    load_in_4bit : bool, default False
        Every point loads the model in 4 bits (BitsAndBytesConfig's load_in_4bit). [--load-in-4bit]
    load_in_8bit : bool, default False
        Every point loads the model in 8 bits (BitsAndBytesConfig's load_in_8bit, LLM.int8()).
        [--load-in-8bit]
    llm_int8_threshold : Optional[Union[str, int, float, Sequence[Any]]], default None
        llm_int8_threshold value(s). [--llm-int8-threshold]
    bnb_4bit_use_double_quant : bool, default False
        Every point's 4-bit model uses double quantization. [--bnb-4bit-use-double-quant]
    bnb_4bit_quant_type : Optional[Literal['fp4', 'nf4']], default None
        bnb_4bit_quant_type(s) (nf4, fp4). One of: fp4, nf4. [--bnb-4bit-quant-type]
    bnb_4bit_compute_dtype : Optional[Literal['float32', 'bfloat16', 'float16']], default None
        bnb_4bit_compute_dtype(s). One of: float32, bfloat16, float16. [--bnb-4bit-compute-dtype]
    parallel : Optional[Literal['ddp', 'zero1', 'zero2', 'fsdp', 'hsdp', 'tp']], default None
        Parallel layout(s) (as `profile --parallel`); needs --world-size. One of: ddp, zero1, zero2,
        fsdp, hsdp, tp. [--parallel]
    world_size : Optional[Union[str, int, float, Sequence[Any]]], default None
        Ranks in the job (with --parallel) Each point profiles rank 0, so the table shows how one
        rank's memory falls as ranks are added. [--world-size]
    gpus_per_node : Optional[Union[str, int, float, Sequence[Any]]], default None
        hsdp's shard group size(s). [--gpus-per-node]
    fsdp_param_dtype : Optional[Union[str, int, float, Sequence[Any]]], default None
        FSDP2 MixedPrecisionPolicy param_dtype(s) (as `profile --fsdp-param-dtype`).
        [--fsdp-param-dtype]
    fsdp_reduce_dtype : Optional[Union[str, int, float, Sequence[Any]]], default None
        FSDP2 MixedPrecisionPolicy reduce_dtype(s). [--fsdp-reduce-dtype]
    fsdp_unit : Optional[Union[str, int, float, Sequence[Any]]], default None
        FSDP units (as `profile --fsdp-unit`: block, every-N, root). [--fsdp-unit]
    warmup_steps : Optional[Union[str, int, float, Sequence[Any]]], default None
        Unrecorded steps run first, so optimizer state exists as in a steady-state step.
        [--warmup-steps]
    measure_steps : Optional[Union[str, int, float, Sequence[Any]]], default None
        Recorded steps after the warm-up. [--measure-steps]
    gpu : Optional[Literal['H100-80GB', 'H200-141GB', 'A100-40GB', 'A100-80GB', 'MI250X-64GB', 'MI300X-192GB', 'RTX4090-24GB', 'RTXA6000-48GB']], default None
        GPU preset(s) bounding the allocator (an OOM at a point is recorded as a result). One of:
        H100-80GB, H200-141GB, A100-40GB, A100-80GB, MI250X-64GB, MI300X-192GB, RTX4090-24GB,
        RTXA6000-48GB. [--gpu]
    memory_limit : Optional[Union[str, int, float, Sequence[Any]]], default None
        Device memory size(s) instead of --gpu (e.g. 24GiB). [--memory-limit]
    memory_fraction : Optional[Union[str, int, float, Sequence[Any]]], default None
        Share(s) of device memory the allocator may use; needs --gpu or --memory-limit
        torch.cuda.set_per_process_memory_fraction. [--memory-fraction]
    allocator_conf : Optional[Union[str, int, float, Sequence[Any]]], default None
        PYTORCH_CUDA_ALLOC_CONF string(s); separate several with ';' (a conf itself uses commas).
        [--allocator-conf]
    seed : Optional[Union[str, int, float, Sequence[Any]]], default None
        Random seed for the weights and the synthetic data. [--seed]
    device : str, default 'meta'
        meta (shapes only, default) or cpu (real numerics). [--device]
    snapshots : bool, default False
        Also write each point's snapshot and HTML report (under <out-dir>/points/). [--snapshots]
    out_dir : Optional[Union[str, PathLike[str]]], default None
        Folder sweep.json, .csv, .md and the plots are written to (created if missing); default:
        nothing is written. [--out-dir]
    threads : Optional[int], default None
        CPU threads for the cpu device (default: all cores). [--threads]

    Returns
    -------
    JobResult
    """

def fit(
    model: Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']] = None,
    *,
    config: Any = None,
    flavour: Optional[Literal['cs336', 'tinyllama', 'hf']] = None,
    hidden_dim: Optional[int] = None,
    num_layers: Optional[int] = None,
    num_heads: Optional[int] = None,
    num_kv_heads: Optional[int] = None,
    intermediate_dim: Optional[int] = None,
    vocab_size: Optional[int] = None,
    max_seq_len: Optional[int] = None,
    rope_theta: Optional[float] = None,
    norm_eps: Optional[float] = None,
    attention: Optional[Literal['naive', 'flash']] = None,
    attn_implementation: Optional[Literal['eager', 'sdpa', 'flash_attention_2']] = None,
    sdpa_backend: Optional[Literal['auto', 'flash', 'efficient', 'math', 'cpu_flash', 'cudnn']] = None,
    use_cache: Optional[Literal['true', 'false']] = None,
    logits_to_keep: Optional[int] = None,
    gradient_checkpointing: Optional[Literal['none', 'non-reentrant', 'reentrant']] = None,
    attention_mask: Optional[Literal['none', 'ones']] = None,
    lora_r: Optional[int] = None,
    lora_alpha: Optional[float] = None,
    lora_dropout: Optional[float] = None,
    target_modules: Optional[Literal['all-linear', 'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'w1', 'w3', 'w2', 'gate']] = None,
    target_parameters: Optional[Literal['mlp.gate.weight', 'mlp.router.weight', 'mlp.experts.gate_up_proj', 'mlp.experts.down_proj']] = None,
    lora_bias: Optional[str] = None,
    use_dora: bool = False,
    modules_to_save: Optional[Literal['embed_tokens', 'lm_head']] = None,
    load_in_4bit: bool = False,
    bnb_4bit_quant_type: Optional[Literal['fp4', 'nf4']] = None,
    bnb_4bit_use_double_quant: bool = False,
    bnb_4bit_compute_dtype: Optional[Literal['float32', 'bfloat16', 'float16']] = None,
    bnb_4bit_quant_storage: Optional[Literal['uint8', 'bfloat16', 'float16', 'float32']] = None,
    prepare_model_for_kbit_training: Optional[str] = None,
    load_in_8bit: bool = False,
    llm_int8_threshold: Optional[float] = None,
    experts_implementation: Optional[str] = None,
    routing: Optional[str] = None,
    output_router_logits: bool = False,
    precision: Optional[Literal['fp32', 'bf16', 'fp16', 'pure-bf16']] = None,
    use_mixed_precision: bool = False,
    dtype: Optional[Literal['auto', 'float32', 'bfloat16', 'float16', 'bf16', 'fp16']] = None,
    use_amp: bool = False,
    pure_bf16: bool = False,
    autocast_by: Optional[Literal['accelerate', 'torch']] = None,
    checkpoint: Optional[Literal['none', 'blocks', 'every-N']] = None,
    fusion: Optional[Literal['none', 'all']] = None,
    fused_qkv: bool = False,
    fused_gate_up: bool = False,
    optimizer: Optional[Literal['adamw_torch_fused', 'adamw_torch', 'adamw_torch_forloop', 'sgd', 'adamw_cs336', 'adamw_bnb_8bit', 'paged_adamw_8bit', 'paged_adamw_32bit', 'adafactor']] = None,
    max_grad_norm: Optional[float] = None,
    parallel: Optional[Literal['ddp', 'zero1', 'zero2', 'fsdp', 'hsdp', 'tp']] = None,
    world_size: Optional[int] = None,
    rank: Optional[int] = None,
    gpus_per_node: Optional[int] = None,
    no_reshard_after_forward: bool = False,
    fsdp_param_dtype: Optional[Literal['bf16', 'fp16', 'fp32']] = None,
    fsdp_reduce_dtype: Optional[Literal['bf16', 'fp16', 'fp32']] = None,
    fsdp_unit: Optional[str] = None,
    offload: Optional[Literal['params']] = None,
    tp: Optional[int] = None,
    sequence_parallel: bool = False,
    tp_plan: Optional[Literal['auto', 'torch']] = None,
    find: Literal['batch', 'context', 'world-size', 'max-new-tokens'] = 'batch',
    profile_type: Literal['forward', 'forward-loss', 'inference', 'training', 'generate'] = 'training',
    max_new_tokens: Optional[int] = None,
    batch_size: Optional[int] = None,
    context_length: Optional[int] = None,
    gpu: Optional[Literal['H100-80GB', 'H200-141GB', 'A100-40GB', 'A100-80GB', 'MI250X-64GB', 'MI300X-192GB', 'RTX4090-24GB', 'RTXA6000-48GB']] = None,
    memory_limit: Optional[str] = None,
    memory_fraction: Optional[float] = None,
    allocator_conf: Optional[str] = None,
    warmup_steps: int = 1,
    max: Optional[int] = None,
    reserve: Optional[str] = None,
) -> JobResult:
    """``vramscope fit``: The largest batch size or longest context that fits a GPU (search over meta
    runs).

    The largest batch size or context (``find=``), or the fewest GPUs (``find='world-size'``), that
    fits ``gpu=``; fit's ``--json`` object.

    Keywords are the command's flags in Python spelling (``context_length=512`` is
    ``--context-length 512``, ``flops=True`` is ``--flops``, a list is a comma list); defaults and
    checks are the command line's. An unknown keyword raises TypeError, a bad value ValueError.

    Parameters
    ----------
    model : Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']], default None
        Model preset (the names below; a cs336-/tinyllama-/hf- prefix is accepted on any) small,
        medium and large exist in both cs336 and tinyllama: a bare name takes the command's seed's
        (profile, sweep, fit, estimate, run-all: CS336's; train, study: the workshop's); cs336-NAME
        / tinyllama-NAME or --flavour choose explicitly. Names are case-insensitive. One of:
        cs336-small, cs336-medium, cs336-large, xl, 2.7B, walkthrough, script, tiny,
        tinyllama-small, tinyllama-medium, tinyllama-large, very_large, Llama-3.2-1B, Llama-3.1-8B,
        Llama-3.1-70B, Mistral-7B, Qwen2.5-7B, Qwen3-8B, Phi-3-mini, OLMo-2-7B, Gemma-2-9B,
        Gemma-3-27B, Mixtral-8x7B, Qwen3-30B-A3B, gpt-oss-20b, gpt-oss-120b, DeepSeek-V3,
        Mistral-7B-v0.3. [--preset; also model_size=, preset=]
    config : Any, default None
        A Hugging Face config.json (or a model folder holding one) instead of a preset Only
        config.json is read: model_type llama, mistral, qwen2, qwen3, phi3, olmo2, gemma2,
        gemma3_text, mixtral, qwen3_moe, qwen2_moe, gpt_oss or deepseek_v3, run as transformers
        5.23.0's modeling code (the hf flavour), with that release's config defaults. Its
        torch_dtype is the weights' type, as from_pretrained(dtype="auto") loads them (--dtype
        overrides it). Shape flags override it; --flavour cs336|tinyllama maps a plain llama shape
        onto those flavours. Also a dict (a config.json's content) or a transformers
        ``PretrainedConfig`` (anything with ``to_dict()``). [--config]
    flavour : Optional[Literal['cs336', 'tinyllama', 'hf']], default None
        Reference implementation to reproduce. One of: cs336, tinyllama, hf. [--flavour]
    hidden_dim : Optional[int], default None
        Hidden size d_model. [--hidden-dim]
    num_layers : Optional[int], default None
        Transformer layers (also the workshop guide's --n-layers). [--num-layers; also n_layers=]
    num_heads : Optional[int], default None
        Attention heads (also --n-heads). [--num-heads; also n_heads=]
    num_kv_heads : Optional[int], default None
        Key/value heads (grouped-query attention when fewer than --num-heads; also --n-kv-heads).
        [--num-kv-heads; also n_kv_heads=]
    intermediate_dim : Optional[int], default None
        Feed-forward size d_ff. [--intermediate-dim]
    vocab_size : Optional[int], default None
        Vocabulary size (rows of the embedding and the LM head). [--vocab-size]
    max_seq_len : Optional[int], default None
        Longest sequence the model accepts (sizes cs336's RoPE buffer) Default: the preset's, raised
        to the run's sequence length as both seed scripts do. [--max-seq-len]
    rope_theta : Optional[float], default None
        RoPE base frequency theta. [--rope-theta]
    norm_eps : Optional[float], default None
        RMSNorm epsilon. [--norm-eps]
    attention : Optional[Literal['naive', 'flash']], default None
        Attention computation (cs336 and tinyllama flavours). One of: naive, flash. [--attention]
    attn_implementation : Optional[Literal['eager', 'sdpa', 'flash_attention_2']], default None
        hf flavour: transformers' attn_implementation (default sdpa, as transformers'). One of:
        eager, sdpa, flash_attention_2. [--attn-implementation]
    sdpa_backend : Optional[Literal['auto', 'flash', 'efficient', 'math', 'cpu_flash', 'cudnn']], default None
        hf flavour, sdpa: the kernel F.scaled_dot_product_attention runs on CUDA auto (the default)
        is what PyTorch 2.11 picks for the dtype, mask and GPU (cuDNN attention for fp16/bf16 on an
        H100/H200 --gpu, else flash); it is printed with the run. One of: auto, flash, efficient,
        math, cpu_flash, cudnn. [--sdpa-backend]
    use_cache : Optional[Literal['true', 'false']], default None
        hf flavour: use_cache true|false (default: the config's) true for every shipped preset: a
        forward fills a DynamicCache with each layer's keys and values. One of: true, false.
        [--use-cache]
    logits_to_keep : Optional[int], default None
        hf flavour: logits_to_keep: the LM head runs on the last N positions only (0: all)
        transformers' loss needs every position, so N < the context is for inference.
        [--logits-to-keep]
    gradient_checkpointing : Optional[Literal['none', 'non-reentrant', 'reentrant']], default None
        hf flavour: gradient_checkpointing_enable(): none, non-reentrant or reentrant non-reentrant
        is use_reentrant=False, the same as --checkpoint blocks. One of: none, non-reentrant,
        reentrant. [--gradient-checkpointing]
    attention_mask : Optional[Literal['none', 'ones']], default None
        hf flavour: the attention_mask passed with the batch: none (the default) or ones ones is
        what an unpadded tokenizer batch carries. One of: none, ones. [--attention-mask]
    lora_r : Optional[int], default None
        hf flavour, peft LoraConfig's r: turns LoRA on get_peft_model over the loaded model: base
        weights frozen, fp32 adapters lora_A/lora_B trained. [--lora-r]
    lora_alpha : Optional[float], default None
        LoraConfig's lora_alpha (peft's default 8; scaling = alpha / r). [--lora-alpha]
    lora_dropout : Optional[float], default None
        LoraConfig's lora_dropout on the adapters' input in training (peft's default 0.0).
        [--lora-dropout]
    target_modules : Optional[Literal['all-linear', 'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'w1', 'w3', 'w2', 'gate']], default None
        LoraConfig's target_modules: all-linear, or a comma list of modules peft's default is
        q_proj,v_proj for llama, mistral, qwen2, qwen3, gemma2 and gemma3_text; phi3, olmo2 and the
        mixture-of-experts types need them named (Phi-3's are qkv_proj, o_proj, gate_up_proj,
        down_proj; an MoE model's adaptable linears are its attention's). On mixtral, qwen3_moe and
        deepseek_v3 peft converts the transformers-4 names of the experts and the router (mixtral:
        w1, w3, w2, gate; the others: gate_proj, up_proj, down_proj, gate), all-linear included,
        into --target-parameters, with r and lora_alpha doubled on gate_up_proj (both of its halves
        must be named). One of: all-linear, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
        down_proj, qkv_proj, gate_up_proj, w1, w3, w2, gate. [--target-modules]
    target_parameters : Optional[Literal['mlp.gate.weight', 'mlp.router.weight', 'mlp.experts.gate_up_proj', 'mlp.experts.down_proj']], default None
        LoraConfig's target_parameters: a comma list of a sparse MoE block's parameters peft's
        ParamWrapper (one LoRA per expert) on mlp.experts.gate_up_proj, mlp.experts.down_proj and
        the router's mlp.gate.weight (gpt_oss: mlp.router.weight; matched by suffix as peft matches
        them). Without --target-modules no module is adapted. One of: mlp.gate.weight,
        mlp.router.weight, mlp.experts.gate_up_proj, mlp.experts.down_proj. [--target-parameters]
    lora_bias : Optional[str], default None
        LoraConfig's bias: none (peft's default), all or lora_only all: every bias of the model
        trains; lora_only: the adapted projections' biases train. [--lora-bias]
    use_dora : bool, default False
        LoraConfig's use_dora: DoRA (weight-decomposed LoRA) on the adapted projections A trainable
        fp32 magnitude per output feature; every forward rebuilds the adapter's dense update and the
        weight's row norms (a 4-bit weight is dequantized for it). [--use-dora]
    modules_to_save : Optional[Literal['embed_tokens', 'lm_head']], default None
        LoraConfig's modules_to_save: a comma list of embed_tokens and lm_head peft's
        ModulesToSaveWrapper: the original module kept frozen and a trainable deep copy in its dtype
        (after prepare_model_for_kbit_training's fp32 cast under 4-bit), with its gradient and
        optimizer state. On a model with tied embeddings the copy unties them (peft warns): the
        other end keeps the frozen original. One of: embed_tokens, lm_head. [--modules-to-save]
    load_in_4bit : bool, default False
        hf flavour, BitsAndBytesConfig's load_in_4bit (QLoRA with --lora-r) Every decoder linear is
        stored in 4 bits by bitsandbytes (lm_head, embedding and norms unquantized).
        [--load-in-4bit]
    bnb_4bit_quant_type : Optional[Literal['fp4', 'nf4']], default None
        BitsAndBytesConfig's bnb_4bit_quant_type: fp4 (bitsandbytes' default) or nf4. One of: fp4,
        nf4. [--bnb-4bit-quant-type]
    bnb_4bit_use_double_quant : bool, default False
        BitsAndBytesConfig's bnb_4bit_use_double_quant 8-bit block scales, one fp32 scale per 256
        blocks. [--bnb-4bit-use-double-quant]
    bnb_4bit_compute_dtype : Optional[Literal['float32', 'bfloat16', 'float16']], default None
        BitsAndBytesConfig's bnb_4bit_compute_dtype: float32 (the default), bfloat16 or float16. One
        of: float32, bfloat16, float16. [--bnb-4bit-compute-dtype]
    bnb_4bit_quant_storage : Optional[Literal['uint8', 'bfloat16', 'float16', 'float32']], default None
        BitsAndBytesConfig's bnb_4bit_quant_storage: uint8 (the default), or the compute dtype for
        FSDP-QLoRA (the same packed bytes). One of: uint8, bfloat16, float16, float32.
        [--bnb-4bit-quant-storage]
    prepare_model_for_kbit_training : Optional[str], default None
        peft's prepare_model_for_kbit_training on the 4-bit or 8-bit model: true (the default; false
        with --profile-type generate) or false QLoRA recipes call it: unquantized parameters cast to
        fp32, gradient checkpointing with its reentrant default. An inference script does not, so
        generate() runs the model as from_pretrained loads it unless this is given.
        [--prepare-model-for-kbit-training]
    load_in_8bit : bool, default False
        hf flavour, BitsAndBytesConfig's load_in_8bit: LLM.int8() (LoRA with --lora-r) Every decoder
        linear is a bitsandbytes Linear8bitLt: int8 weights with an fp32 scale per row (lm_head,
        embedding and norms unquantized); inputs quantized to int8 per row. [--load-in-8bit]
    llm_int8_threshold : Optional[float], default None
        BitsAndBytesConfig's llm_int8_threshold (default 6.0; 0 turns the outlier split off) With a
        threshold, input columns holding |x| >= it would be multiplied in 16 bits; vramscope counts
        no such column (a normalized input rarely has one). [--llm-int8-threshold]
    experts_implementation : Optional[str], default None
        hf flavour, mixture of experts: transformers' experts_implementation: grouped_mm (the
        default), batched_mm or eager grouped_mm sorts the tokens by expert and runs two grouped
        matmuls; batched_mm gathers each token's expert weights and runs a bmm; eager loops over the
        experts that were hit. [--experts-implementation]
    routing : Optional[str], default None
        hf flavour, mixture of experts: how many tokens each expert gets: balanced (the default),
        worst, or a file of per-expert counts balanced splits the tokens evenly; worst sends every
        token to the same top-k experts; a file holds one count per expert (whitespace or commas)
        adding up to tokens × top-k, where tokens is batch × context. [--routing]
    output_router_logits : bool, default False
        hf flavour, mixture of experts: transformers' output_router_logits: keep every router's
        logits and add the router's auxiliary loss Mixtral, Qwen3-MoE, Qwen2-MoE and gpt-oss:
        load_balancing_loss_func runs on the kept logits in every profile type (transformers
        computes it without labels too), and training adds router_aux_loss_coef (the config's, 0.001
        by default) times it to the loss. DeepSeek-V3 has no such loss. [--output-router-logits]
    precision : Optional[Literal['fp32', 'bf16', 'fp16', 'pure-bf16']], default None
        Training precision (default fp32) bf16: autocast to bf16 around forward and loss; fp16:
        autocast to fp16 with a dynamic loss scaler — parameters, gradients and optimizer state stay
        fp32 — or pure-bf16 (= --pure-bf16). One of: fp32, bf16, fp16, pure-bf16. [--precision]
    use_mixed_precision : bool, default False
        CS336 spelling of autocast: with --dtype bf16 (default) or fp16. [--use-mixed-precision]
    dtype : Optional[Literal['auto', 'float32', 'bfloat16', 'float16', 'bf16', 'fp16']], default None
        hf flavour: from_pretrained's dtype; with --use-mixed-precision: the autocast type auto (the
        default, as in transformers 5: the config's torch_dtype, bfloat16 for every hf preset;
        float32 when it names none), float32, bfloat16 or float16. With --use-mixed-precision:
        CS336's autocast type, bf16 or fp16. One of: auto, float32, bfloat16, float16, bf16, fp16.
        [--dtype]
    use_amp : bool, default False
        The workshop's spelling: fp16 autocast with a GradScaler. [--use-amp]
    pure_bf16 : bool, default False
        Parameters, gradients and optimizer state in bf16 (`model.to(torch.bfloat16)`), no autocast.
        [--pure-bf16]
    autocast_by : Optional[Literal['accelerate', 'torch']], default None
        Who applies the autocast, hf flavour: accelerate (default) or torch. accelerate is the
        Trainer's bf16=True/fp16=True (or `Accelerator(mixed_precision=...)`): `prepare_model` wraps
        the model's forward in autocast and `convert_outputs_to_fp32`, so the output's bf16/fp16
        tensors (the logits, an MoE model's router logits) get an fp32 copy that lives until
        compute_loss drops the output (training and forward-loss). torch is your own loop's `with
        torch.autocast(...)` around the model call, no conversion. The cs336 and tinyllama flavours
        run their scripts' plain torch.autocast. One of: accelerate, torch. [--autocast-by]
    checkpoint : Optional[Literal['none', 'blocks', 'every-N']], default None
        Activation checkpointing: none, blocks or every-N torch.utils.checkpoint with
        use_reentrant=False, on every decoder block (blocks) or on blocks 0, N, 2N, … (every-N). One
        of: none, blocks, every-N. [--checkpoint]
    fusion : Optional[Literal['none', 'all']], default None
        Projection fusions of the workshop's version 2: none or all all is --fused-qkv and
        --fused-gate-up; its flash attention is --attention flash. One of: none, all. [--fusion]
    fused_qkv : bool, default False
        One QKV projection whose output is split into Q, K, V views. [--fused-qkv]
    fused_gate_up : bool, default False
        One gate/up projection whose output is chunked into two views. [--fused-gate-up]
    optimizer : Optional[Literal['adamw_torch_fused', 'adamw_torch', 'adamw_torch_forloop', 'sgd', 'adamw_cs336', 'adamw_bnb_8bit', 'paged_adamw_8bit', 'paged_adamw_32bit', 'adafactor']], default None
        Optimizer implementation, in the Trainer's `optim` names (default: the flavour's) The
        flavour's reference is the default: cs336 adamw_cs336, tinyllama adamw_torch, hf
        adamw_torch_fused (the Trainer's default). adamw_torch_foreach is adamw_torch and adamw_8bit
        is adamw_bnb_8bit; bitsandbytes' optimizers need --device meta. One of: adamw_torch_fused,
        adamw_torch, adamw_torch_forloop, sgd, adamw_cs336, adamw_bnb_8bit, paged_adamw_8bit,
        paged_adamw_32bit, adafactor. [--optimizer]
    max_grad_norm : Optional[float], default None
        clip_grad_norm_(params, X) before each optimizer step; 0 = off
        torch.nn.utils.clip_grad_norm_; the hf flavour's Trainer still computes the norm, with
        max_norm inf, to log it. Default: the flavour's: 1.0 for hf (the Trainer's max_grad_norm),
        off for cs336 and tinyllama. [--max-grad-norm]
    parallel : Optional[Literal['ddp', 'zero1', 'zero2', 'fsdp', 'hsdp', 'tp']], default None
        Simulate one rank of a parallel job with this layout (needs --world-size). One of: ddp,
        zero1, zero2, fsdp, hsdp, tp. [--parallel]
    world_size : Optional[int], default None
        Ranks in the job (with --parallel). [--world-size]
    rank : Optional[int], default None
        Profile only this rank (default: rank 0 and every rank whose shard sizes differ). [--rank]
    gpus_per_node : Optional[int], default None
        hsdp: ranks per node, the shard group (default 8). [--gpus-per-node]
    no_reshard_after_forward : bool, default False
        fsdp/hsdp: keep each block's unsharded parameters from forward to backward
        fully_shard(reshard_after_forward=False), ZeRO-2-like. [--no-reshard-after-forward]
    fsdp_param_dtype : Optional[Literal['bf16', 'fp16', 'fp32']], default None
        fsdp/hsdp: MixedPrecisionPolicy(param_dtype=...): bf16, fp16 or fp32. One of: bf16, fp16,
        fp32. [--fsdp-param-dtype]
    fsdp_reduce_dtype : Optional[Literal['bf16', 'fp16', 'fp32']], default None
        fsdp/hsdp: MixedPrecisionPolicy(reduce_dtype=...): bf16, fp16 or fp32. One of: bf16, fp16,
        fp32. [--fsdp-reduce-dtype]
    fsdp_unit : Optional[str], default None
        zero2/fsdp/hsdp units: block (the default), every-N or root block: fully_shard on each
        decoder block, then the root; every-N: on each group of N consecutive blocks; root:
        fully_shard(model) alone, every parameter gathered at once. [--fsdp-unit]
    offload : Optional[Literal['params']], default None
        params: FSDP2's CPUOffloadPolicy Sharded parameters, gradients and the optimizer step on the
        host; host memory is reported separately. One of: params. [--offload]
    tp : Optional[int], default None
        Tensor-parallel ranks (hf flavour) torch's Megatron-style plan (q/k/v/gate/up
        ColwiseParallel, o/down RowwiseParallel, vocabulary-parallel embedding, head gathered) on
        Llama-style models, transformers' own on phi3, olmo2, gemma2, gemma3_text and the MoE models
        but gpt-oss (their experts under moe_tp_experts; --tp-plan). With --parallel fsdp or zero2:
        a (world-size / N, N) mesh, FSDP2 over the first dimension (2-D); --parallel tp: N =
        --world-size. [--tp]
    sequence_parallel : bool, default False
        With --parallel tp: torch's SequenceParallel plan too Norms and the residual stream on S / N
        positions, hidden states all-gathered before attention, the MLP and the head; the batch
        passes position_ids. [--sequence-parallel]
    tp_plan : Optional[Literal['auto', 'torch']], default None
        With --tp: whose plan shards the model, auto or torch auto: transformers' own
        (from_pretrained(tp_plan="auto"): the config's base_model_tp_plan, the embedding
        vocabulary-parallel, the head gathered), the only plan on phi3, olmo2, gemma2, gemma3_text,
        mixtral, qwen3_moe, qwen2_moe and deepseek_v3 (the experts' packed_colwise gate_up and
        rowwise down under moe_tp_experts); torch: the Megatron-style plan above, the default on
        Llama-style models. One of: auto, torch. [--tp-plan]
    find : Literal['batch', 'context', 'world-size', 'max-new-tokens'], default 'batch'
        What to search for. One of: batch, context, world-size, max-new-tokens. [--find]
    profile_type : Literal['forward', 'forward-loss', 'inference', 'training', 'generate'], default 'training'
        What the step runs forward: `model(x)` with autograd, no loss; forward-loss: plus the loss,
        no backward; inference: no_grad (one forward of the whole prompt, the prefill); training:
        one full step after warm-up; generate (hf models): greedy `model.generate(input_ids,
        max_new_tokens=N, do_sample=False)`, its prefill and every decode step. One of: forward,
        forward-loss, inference, training, generate. [--profile-type]
    max_new_tokens : Optional[int], default None
        GenerationConfig's max_new_tokens held fixed with --profile-type generate (what --find
        max-new-tokens searches for). [--max-new-tokens]
    batch_size : Optional[int], default None
        Batch size held fixed when finding the context (default: the preset's). [--batch-size]
    context_length : Optional[int], default None
        Context length held fixed when finding the batch size (default: the preset's).
        [--context-length; also seq_len=]
    gpu : Optional[Literal['H100-80GB', 'H200-141GB', 'A100-40GB', 'A100-80GB', 'MI250X-64GB', 'MI300X-192GB', 'RTX4090-24GB', 'RTXA6000-48GB']], default None
        GPU whose memory bounds the allocator (as for `profile`). One of: H100-80GB, H200-141GB,
        A100-40GB, A100-80GB, MI250X-64GB, MI300X-192GB, RTX4090-24GB, RTXA6000-48GB. [--gpu]
    memory_limit : Optional[str], default None
        Device memory instead of a --gpu preset (e.g. 24GiB). [--memory-limit]
    memory_fraction : Optional[float], default None
        torch.cuda.set_per_process_memory_fraction share of the device. [--memory-fraction]
    allocator_conf : Optional[str], default None
        PYTORCH_CUDA_ALLOC_CONF string (default: that environment variable). [--allocator-conf]
    warmup_steps : int, default 1
        Steps before the measured one (training: optimizer state exists after one). [--warmup-steps]
    max : Optional[int], default None
        Largest value tried Default: for --find context, the model's maximum sequence length when
        --max-seq-len or a config.json fixes one; else 1048576. [--max]
    reserve : Optional[str], default None
        Device memory kept free for what the allocator model does not hold The CUDA context and the
        cuBLAS workspaces (default: the CUDA context, 757 MiB measured on H100/H200 and 512 MiB
        elsewhere, + 32 MiB per cuBLAS handle on H100/H200, 8.125 MiB elsewhere; two handles for
        training; see the README). 0 for none. [--reserve]

    Returns
    -------
    JobResult
    """

def estimate(
    model: Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']] = None,
    *,
    config: Any = None,
    flavour: Optional[Literal['cs336', 'tinyllama', 'hf']] = None,
    hidden_dim: Optional[int] = None,
    num_layers: Optional[int] = None,
    num_heads: Optional[int] = None,
    num_kv_heads: Optional[int] = None,
    intermediate_dim: Optional[int] = None,
    vocab_size: Optional[int] = None,
    max_seq_len: Optional[int] = None,
    rope_theta: Optional[float] = None,
    norm_eps: Optional[float] = None,
    attention: Optional[Literal['naive', 'flash']] = None,
    attn_implementation: Optional[Literal['eager', 'sdpa', 'flash_attention_2']] = None,
    sdpa_backend: Optional[Literal['auto', 'flash', 'efficient', 'math', 'cpu_flash', 'cudnn']] = None,
    use_cache: Optional[Literal['true', 'false']] = None,
    logits_to_keep: Optional[int] = None,
    gradient_checkpointing: Optional[Literal['none', 'non-reentrant', 'reentrant']] = None,
    attention_mask: Optional[Literal['none', 'ones']] = None,
    lora_r: Optional[int] = None,
    lora_alpha: Optional[float] = None,
    lora_dropout: Optional[float] = None,
    target_modules: Optional[Literal['all-linear', 'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'w1', 'w3', 'w2', 'gate']] = None,
    target_parameters: Optional[Literal['mlp.gate.weight', 'mlp.router.weight', 'mlp.experts.gate_up_proj', 'mlp.experts.down_proj']] = None,
    lora_bias: Optional[str] = None,
    use_dora: bool = False,
    modules_to_save: Optional[Literal['embed_tokens', 'lm_head']] = None,
    load_in_4bit: bool = False,
    bnb_4bit_quant_type: Optional[Literal['fp4', 'nf4']] = None,
    bnb_4bit_use_double_quant: bool = False,
    bnb_4bit_compute_dtype: Optional[Literal['float32', 'bfloat16', 'float16']] = None,
    bnb_4bit_quant_storage: Optional[Literal['uint8', 'bfloat16', 'float16', 'float32']] = None,
    prepare_model_for_kbit_training: Optional[str] = None,
    load_in_8bit: bool = False,
    llm_int8_threshold: Optional[float] = None,
    experts_implementation: Optional[str] = None,
    routing: Optional[str] = None,
    output_router_logits: bool = False,
    precision: Optional[Literal['fp32', 'bf16', 'fp16', 'pure-bf16']] = None,
    use_mixed_precision: bool = False,
    dtype: Optional[Literal['auto', 'float32', 'bfloat16', 'float16', 'bf16', 'fp16']] = None,
    use_amp: bool = False,
    pure_bf16: bool = False,
    autocast_by: Optional[Literal['accelerate', 'torch']] = None,
    optimizer: Optional[Literal['adamw_torch_fused', 'adamw_torch', 'adamw_torch_forloop', 'sgd', 'adamw_cs336', 'adamw_bnb_8bit', 'paged_adamw_8bit', 'paged_adamw_32bit', 'adafactor']] = None,
    max_grad_norm: Optional[float] = None,
    batch_size: Optional[int] = None,
    context_length: Optional[int] = None,
    profile_type: Literal['forward', 'forward-loss', 'inference', 'training', 'generate'] = 'training',
    max_new_tokens: Optional[int] = None,
    cache_implementation: Optional[str] = None,
    disable_compile: bool = False,
    do_sample: bool = False,
    temperature: Optional[float] = None,
    top_k: Optional[int] = None,
    top_p: Optional[float] = None,
    min_new_tokens: Optional[int] = None,
    num_beams: Optional[int] = None,
    num_return_sequences: Optional[int] = None,
    no_simulate: bool = False,
) -> JobResult:
    """``vramscope estimate``: Closed-form memory of a configuration with its derivation, beside a
    simulated meta run.

    The closed-form memory with its terms, beside a meta run; estimate's ``--json`` object.

    Keywords are the command's flags in Python spelling (``context_length=512`` is
    ``--context-length 512``, ``flops=True`` is ``--flops``, a list is a comma list); defaults and
    checks are the command line's. An unknown keyword raises TypeError, a bad value ValueError.

    Parameters
    ----------
    model : Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']], default None
        Model preset (the names below; a cs336-/tinyllama-/hf- prefix is accepted on any) small,
        medium and large exist in both cs336 and tinyllama: a bare name takes the command's seed's
        (profile, sweep, fit, estimate, run-all: CS336's; train, study: the workshop's); cs336-NAME
        / tinyllama-NAME or --flavour choose explicitly. Names are case-insensitive. One of:
        cs336-small, cs336-medium, cs336-large, xl, 2.7B, walkthrough, script, tiny,
        tinyllama-small, tinyllama-medium, tinyllama-large, very_large, Llama-3.2-1B, Llama-3.1-8B,
        Llama-3.1-70B, Mistral-7B, Qwen2.5-7B, Qwen3-8B, Phi-3-mini, OLMo-2-7B, Gemma-2-9B,
        Gemma-3-27B, Mixtral-8x7B, Qwen3-30B-A3B, gpt-oss-20b, gpt-oss-120b, DeepSeek-V3,
        Mistral-7B-v0.3. [--preset; also model_size=, preset=]
    config : Any, default None
        A Hugging Face config.json (or a model folder holding one) instead of a preset Only
        config.json is read: model_type llama, mistral, qwen2, qwen3, phi3, olmo2, gemma2,
        gemma3_text, mixtral, qwen3_moe, qwen2_moe, gpt_oss or deepseek_v3, run as transformers
        5.23.0's modeling code (the hf flavour), with that release's config defaults. Its
        torch_dtype is the weights' type, as from_pretrained(dtype="auto") loads them (--dtype
        overrides it). Shape flags override it; --flavour cs336|tinyllama maps a plain llama shape
        onto those flavours. Also a dict (a config.json's content) or a transformers
        ``PretrainedConfig`` (anything with ``to_dict()``). [--config]
    flavour : Optional[Literal['cs336', 'tinyllama', 'hf']], default None
        Reference implementation to reproduce. One of: cs336, tinyllama, hf. [--flavour]
    hidden_dim : Optional[int], default None
        Hidden size d_model. [--hidden-dim]
    num_layers : Optional[int], default None
        Transformer layers (also the workshop guide's --n-layers). [--num-layers; also n_layers=]
    num_heads : Optional[int], default None
        Attention heads (also --n-heads). [--num-heads; also n_heads=]
    num_kv_heads : Optional[int], default None
        Key/value heads (grouped-query attention when fewer than --num-heads; also --n-kv-heads).
        [--num-kv-heads; also n_kv_heads=]
    intermediate_dim : Optional[int], default None
        Feed-forward size d_ff. [--intermediate-dim]
    vocab_size : Optional[int], default None
        Vocabulary size (rows of the embedding and the LM head). [--vocab-size]
    max_seq_len : Optional[int], default None
        Longest sequence the model accepts (sizes cs336's RoPE buffer) Default: the preset's, raised
        to the run's sequence length as both seed scripts do. [--max-seq-len]
    rope_theta : Optional[float], default None
        RoPE base frequency theta. [--rope-theta]
    norm_eps : Optional[float], default None
        RMSNorm epsilon. [--norm-eps]
    attention : Optional[Literal['naive', 'flash']], default None
        Attention computation (cs336 and tinyllama flavours). One of: naive, flash. [--attention]
    attn_implementation : Optional[Literal['eager', 'sdpa', 'flash_attention_2']], default None
        hf flavour: transformers' attn_implementation (default sdpa, as transformers'). One of:
        eager, sdpa, flash_attention_2. [--attn-implementation]
    sdpa_backend : Optional[Literal['auto', 'flash', 'efficient', 'math', 'cpu_flash', 'cudnn']], default None
        hf flavour, sdpa: the kernel F.scaled_dot_product_attention runs on CUDA auto (the default)
        is what PyTorch 2.11 picks for the dtype, mask and GPU (cuDNN attention for fp16/bf16 on an
        H100/H200 --gpu, else flash); it is printed with the run. One of: auto, flash, efficient,
        math, cpu_flash, cudnn. [--sdpa-backend]
    use_cache : Optional[Literal['true', 'false']], default None
        hf flavour: use_cache true|false (default: the config's) true for every shipped preset: a
        forward fills a DynamicCache with each layer's keys and values. One of: true, false.
        [--use-cache]
    logits_to_keep : Optional[int], default None
        hf flavour: logits_to_keep: the LM head runs on the last N positions only (0: all)
        transformers' loss needs every position, so N < the context is for inference.
        [--logits-to-keep]
    gradient_checkpointing : Optional[Literal['none', 'non-reentrant', 'reentrant']], default None
        hf flavour: gradient_checkpointing_enable(): none, non-reentrant or reentrant non-reentrant
        is use_reentrant=False, the same as --checkpoint blocks. One of: none, non-reentrant,
        reentrant. [--gradient-checkpointing]
    attention_mask : Optional[Literal['none', 'ones']], default None
        hf flavour: the attention_mask passed with the batch: none (the default) or ones ones is
        what an unpadded tokenizer batch carries. One of: none, ones. [--attention-mask]
    lora_r : Optional[int], default None
        hf flavour, peft LoraConfig's r: turns LoRA on get_peft_model over the loaded model: base
        weights frozen, fp32 adapters lora_A/lora_B trained. [--lora-r]
    lora_alpha : Optional[float], default None
        LoraConfig's lora_alpha (peft's default 8; scaling = alpha / r). [--lora-alpha]
    lora_dropout : Optional[float], default None
        LoraConfig's lora_dropout on the adapters' input in training (peft's default 0.0).
        [--lora-dropout]
    target_modules : Optional[Literal['all-linear', 'q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'w1', 'w3', 'w2', 'gate']], default None
        LoraConfig's target_modules: all-linear, or a comma list of modules peft's default is
        q_proj,v_proj for llama, mistral, qwen2, qwen3, gemma2 and gemma3_text; phi3, olmo2 and the
        mixture-of-experts types need them named (Phi-3's are qkv_proj, o_proj, gate_up_proj,
        down_proj; an MoE model's adaptable linears are its attention's). On mixtral, qwen3_moe and
        deepseek_v3 peft converts the transformers-4 names of the experts and the router (mixtral:
        w1, w3, w2, gate; the others: gate_proj, up_proj, down_proj, gate), all-linear included,
        into --target-parameters, with r and lora_alpha doubled on gate_up_proj (both of its halves
        must be named). One of: all-linear, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
        down_proj, qkv_proj, gate_up_proj, w1, w3, w2, gate. [--target-modules]
    target_parameters : Optional[Literal['mlp.gate.weight', 'mlp.router.weight', 'mlp.experts.gate_up_proj', 'mlp.experts.down_proj']], default None
        LoraConfig's target_parameters: a comma list of a sparse MoE block's parameters peft's
        ParamWrapper (one LoRA per expert) on mlp.experts.gate_up_proj, mlp.experts.down_proj and
        the router's mlp.gate.weight (gpt_oss: mlp.router.weight; matched by suffix as peft matches
        them). Without --target-modules no module is adapted. One of: mlp.gate.weight,
        mlp.router.weight, mlp.experts.gate_up_proj, mlp.experts.down_proj. [--target-parameters]
    lora_bias : Optional[str], default None
        LoraConfig's bias: none (peft's default), all or lora_only all: every bias of the model
        trains; lora_only: the adapted projections' biases train. [--lora-bias]
    use_dora : bool, default False
        LoraConfig's use_dora: DoRA (weight-decomposed LoRA) on the adapted projections A trainable
        fp32 magnitude per output feature; every forward rebuilds the adapter's dense update and the
        weight's row norms (a 4-bit weight is dequantized for it). [--use-dora]
    modules_to_save : Optional[Literal['embed_tokens', 'lm_head']], default None
        LoraConfig's modules_to_save: a comma list of embed_tokens and lm_head peft's
        ModulesToSaveWrapper: the original module kept frozen and a trainable deep copy in its dtype
        (after prepare_model_for_kbit_training's fp32 cast under 4-bit), with its gradient and
        optimizer state. On a model with tied embeddings the copy unties them (peft warns): the
        other end keeps the frozen original. One of: embed_tokens, lm_head. [--modules-to-save]
    load_in_4bit : bool, default False
        hf flavour, BitsAndBytesConfig's load_in_4bit (QLoRA with --lora-r) Every decoder linear is
        stored in 4 bits by bitsandbytes (lm_head, embedding and norms unquantized).
        [--load-in-4bit]
    bnb_4bit_quant_type : Optional[Literal['fp4', 'nf4']], default None
        BitsAndBytesConfig's bnb_4bit_quant_type: fp4 (bitsandbytes' default) or nf4. One of: fp4,
        nf4. [--bnb-4bit-quant-type]
    bnb_4bit_use_double_quant : bool, default False
        BitsAndBytesConfig's bnb_4bit_use_double_quant 8-bit block scales, one fp32 scale per 256
        blocks. [--bnb-4bit-use-double-quant]
    bnb_4bit_compute_dtype : Optional[Literal['float32', 'bfloat16', 'float16']], default None
        BitsAndBytesConfig's bnb_4bit_compute_dtype: float32 (the default), bfloat16 or float16. One
        of: float32, bfloat16, float16. [--bnb-4bit-compute-dtype]
    bnb_4bit_quant_storage : Optional[Literal['uint8', 'bfloat16', 'float16', 'float32']], default None
        BitsAndBytesConfig's bnb_4bit_quant_storage: uint8 (the default), or the compute dtype for
        FSDP-QLoRA (the same packed bytes). One of: uint8, bfloat16, float16, float32.
        [--bnb-4bit-quant-storage]
    prepare_model_for_kbit_training : Optional[str], default None
        peft's prepare_model_for_kbit_training on the 4-bit or 8-bit model: true (the default; false
        with --profile-type generate) or false QLoRA recipes call it: unquantized parameters cast to
        fp32, gradient checkpointing with its reentrant default. An inference script does not, so
        generate() runs the model as from_pretrained loads it unless this is given.
        [--prepare-model-for-kbit-training]
    load_in_8bit : bool, default False
        hf flavour, BitsAndBytesConfig's load_in_8bit: LLM.int8() (LoRA with --lora-r) Every decoder
        linear is a bitsandbytes Linear8bitLt: int8 weights with an fp32 scale per row (lm_head,
        embedding and norms unquantized); inputs quantized to int8 per row. [--load-in-8bit]
    llm_int8_threshold : Optional[float], default None
        BitsAndBytesConfig's llm_int8_threshold (default 6.0; 0 turns the outlier split off) With a
        threshold, input columns holding |x| >= it would be multiplied in 16 bits; vramscope counts
        no such column (a normalized input rarely has one). [--llm-int8-threshold]
    experts_implementation : Optional[str], default None
        hf flavour, mixture of experts: transformers' experts_implementation: grouped_mm (the
        default), batched_mm or eager grouped_mm sorts the tokens by expert and runs two grouped
        matmuls; batched_mm gathers each token's expert weights and runs a bmm; eager loops over the
        experts that were hit. [--experts-implementation]
    routing : Optional[str], default None
        hf flavour, mixture of experts: how many tokens each expert gets: balanced (the default),
        worst, or a file of per-expert counts balanced splits the tokens evenly; worst sends every
        token to the same top-k experts; a file holds one count per expert (whitespace or commas)
        adding up to tokens × top-k, where tokens is batch × context. [--routing]
    output_router_logits : bool, default False
        hf flavour, mixture of experts: transformers' output_router_logits: keep every router's
        logits and add the router's auxiliary loss Mixtral, Qwen3-MoE, Qwen2-MoE and gpt-oss:
        load_balancing_loss_func runs on the kept logits in every profile type (transformers
        computes it without labels too), and training adds router_aux_loss_coef (the config's, 0.001
        by default) times it to the loss. DeepSeek-V3 has no such loss. [--output-router-logits]
    precision : Optional[Literal['fp32', 'bf16', 'fp16', 'pure-bf16']], default None
        Training precision (default fp32) bf16: autocast to bf16 around forward and loss; fp16:
        autocast to fp16 with a dynamic loss scaler — parameters, gradients and optimizer state stay
        fp32 — or pure-bf16 (= --pure-bf16). One of: fp32, bf16, fp16, pure-bf16. [--precision]
    use_mixed_precision : bool, default False
        CS336 spelling of autocast: with --dtype bf16 (default) or fp16. [--use-mixed-precision]
    dtype : Optional[Literal['auto', 'float32', 'bfloat16', 'float16', 'bf16', 'fp16']], default None
        hf flavour: from_pretrained's dtype; with --use-mixed-precision: the autocast type auto (the
        default, as in transformers 5: the config's torch_dtype, bfloat16 for every hf preset;
        float32 when it names none), float32, bfloat16 or float16. With --use-mixed-precision:
        CS336's autocast type, bf16 or fp16. One of: auto, float32, bfloat16, float16, bf16, fp16.
        [--dtype]
    use_amp : bool, default False
        The workshop's spelling: fp16 autocast with a GradScaler. [--use-amp]
    pure_bf16 : bool, default False
        Parameters, gradients and optimizer state in bf16 (`model.to(torch.bfloat16)`), no autocast.
        [--pure-bf16]
    autocast_by : Optional[Literal['accelerate', 'torch']], default None
        Who applies the autocast, hf flavour: accelerate (default) or torch. accelerate is the
        Trainer's bf16=True/fp16=True (or `Accelerator(mixed_precision=...)`): `prepare_model` wraps
        the model's forward in autocast and `convert_outputs_to_fp32`, so the output's bf16/fp16
        tensors (the logits, an MoE model's router logits) get an fp32 copy that lives until
        compute_loss drops the output (training and forward-loss). torch is your own loop's `with
        torch.autocast(...)` around the model call, no conversion. The cs336 and tinyllama flavours
        run their scripts' plain torch.autocast. One of: accelerate, torch. [--autocast-by]
    optimizer : Optional[Literal['adamw_torch_fused', 'adamw_torch', 'adamw_torch_forloop', 'sgd', 'adamw_cs336', 'adamw_bnb_8bit', 'paged_adamw_8bit', 'paged_adamw_32bit', 'adafactor']], default None
        Optimizer implementation, in the Trainer's `optim` names (default: the flavour's) The
        flavour's reference is the default: cs336 adamw_cs336, tinyllama adamw_torch, hf
        adamw_torch_fused (the Trainer's default). adamw_torch_foreach is adamw_torch and adamw_8bit
        is adamw_bnb_8bit; bitsandbytes' optimizers need --device meta. One of: adamw_torch_fused,
        adamw_torch, adamw_torch_forloop, sgd, adamw_cs336, adamw_bnb_8bit, paged_adamw_8bit,
        paged_adamw_32bit, adafactor. [--optimizer]
    max_grad_norm : Optional[float], default None
        clip_grad_norm_(params, X) before each optimizer step; 0 = off
        torch.nn.utils.clip_grad_norm_; the hf flavour's Trainer still computes the norm, with
        max_norm inf, to log it. Default: the flavour's: 1.0 for hf (the Trainer's max_grad_norm),
        off for cs336 and tinyllama. [--max-grad-norm]
    batch_size : Optional[int], default None
        Batch size B (default: the preset's). [--batch-size]
    context_length : Optional[int], default None
        Sequence length (default: the preset's). [--context-length; also seq_len=]
    profile_type : Literal['forward', 'forward-loss', 'inference', 'training', 'generate'], default 'training'
        What the step runs: a training step, or generate's KV cache training (the default) is what
        the derivation covers; generate (hf models, with --max-new-tokens): the DynamicCache and the
        peak of generate() in closed form; forward, forward-loss and inference are refused with the
        command that answers them (`profile --profile-type`). One of: forward, forward-loss,
        inference, training, generate. [--profile-type]
    max_new_tokens : Optional[int], default None
        GenerationConfig's max_new_tokens, with --profile-type generate. [--max-new-tokens]
    cache_implementation : Optional[str], default None
        generate's cache_implementation: dynamic (DynamicCache, the default) or static static:
        StaticCache, max_new_tokens + prompt - 1 positions per layer allocated at the prefill and
        written in place (a sliding layer of Gemma 2/3, gpt-oss, Mistral, Mixtral, Phi-3, Qwen2,
        Qwen3 or Qwen3-MoE: at most its window, rolled once full; DeepSeek-V3: its latent and
        k_rot); needs --disable-compile (on CUDA transformers otherwise compiles the decode forward,
        which is not modelled). offloaded is not modelled. [--cache-implementation]
    disable_compile : bool, default False
        GenerationConfig's disable_compile: no automatic torch.compile of the decode forward.
        [--disable-compile]
    do_sample : bool, default False
        GenerationConfig's do_sample: multinomial sampling after the warpers (default top_k 50).
        [--do-sample]
    temperature : Optional[float], default None
        Sampling temperature (default 1.0: no TemperatureLogitsWarper). [--temperature]
    top_k : Optional[int], default None
        Top-k filtering when sampling (default 50; 0 turns TopKLogitsWarper off). [--top-k]
    top_p : Optional[float], default None
        Nucleus filtering when sampling (default 1.0: none); below 1.0 not modelled yet (CUDA's sort
        scratch is unmeasured). [--top-p]
    min_new_tokens : Optional[int], default None
        Tokens generated before eos may end a row (MinLength/MinNewTokensLength processors).
        [--min-new-tokens]
    num_beams : Optional[int], default None
        Beam search's beams (default 1): `_beam_search`, the cache reordered every step
        GenerationConfig's length_penalty 1.0 and early_stopping False; every step runs to
        --max-new-tokens. With --do-sample: beam sampling (the warpers on the log-probabilities,
        multinomial draws of 2 x beams candidates). [--num-beams]
    num_return_sequences : Optional[int], default None
        Sequences returned per prompt (default 1); with beam search at most --num-beams With
        sampling the batch is repeated this many times before the prefill; with beam search generate
        returns the best num_return_sequences beams of each prompt. [--num-return-sequences]
    no_simulate : bool, default False
        Print the closed form only (no simulated meta run beside it). [--no-simulate]

    Returns
    -------
    JobResult
    """

def analyze(
    path: Union[str, PathLike[str]],
    *,
    device: Optional[int] = None,
    detail: float = 100.0,
    top: int = 10,
    max_input_bytes: int = 2147483648,
    max_items: int = 24000000,
    max_containers: int = 3000000,
    max_memo: int = 2000000,
    max_stack: int = 1000000,
    max_depth: int = 256,
    max_bytes_objects: int = 33554432,
    max_frames: int = 2000000,
    max_trace_entries: int = 10500000,
    max_output_bytes: int = 134217728,
) -> AnalyzeResult:
    """``vramscope analyze``: Analyse a memory snapshot pickle (ours or PyTorch's): peak, live set,
    largest allocations.

    A snapshot pickle's peak, live set and largest allocations (PyTorch's own
    ``torch.cuda.memory._dump_snapshot`` files included); ``df`` is what is live at the peak per
    allocation site.

    Keywords are the command's flags in Python spelling (``context_length=512`` is
    ``--context-length 512``, ``flops=True`` is ``--flops``, a list is a comma list); defaults and
    checks are the command line's. An unknown keyword raises TypeError, a bad value ValueError.

    Parameters
    ----------
    path : Union[str, PathLike[str]]
        A snapshot pickle (torch.cuda.memory._dump_snapshot or vramscope profile). [FILE
        (positional)]
    device : Optional[int], default None
        Device whose trace to analyse (default: the one with the most events). [--device]
    detail : float, default 100.0
        Keep the largest PERCENT of allocations, like memory_viz's Detail slider. [--detail]
    top : int, default 10
        How many of the largest allocations and live groups to list. [--top]
    max_input_bytes : int, default 2147483648
        Largest snapshot file to read, in bytes (2 GiB; a pipe or device: at most 256 MiB, read
        whole). [--max-input-bytes]
    max_items : int, default 24000000
        Most values the pickle may store: container elements (a dict entry counts 2) plus strings
        and bytes objects, a count. [--max-items]
    max_containers : int, default 3000000
        Most lists, tuples, dicts, sets and bytes objects in the pickle, a count. [--max-containers]
    max_memo : int, default 2000000
        Most memo entries of the pickle, a count. [--max-memo]
    max_stack : int, default 1000000
        Deepest unpickler stack, in values. [--max-stack]
    max_depth : int, default 256
        Deepest nesting of containers (and of open MARKs), in levels. [--max-depth]
    max_bytes_objects : int, default 33554432
        Most payload bytes of bytes objects in the pickle, in bytes (32 MiB). [--max-bytes-objects]
    max_frames : int, default 2000000
        Most distinct frames plus entries of distinct frame lists, a count. [--max-frames]
    max_trace_entries : int, default 10500000
        Most trace entries of the device plus blocks of its segments, a count. [--max-trace-entries]
    max_output_bytes : int, default 134217728
        Largest HTML page or JSON report to write, in bytes (128 MiB). [--max-output-bytes]

    Returns
    -------
    AnalyzeResult
    """

def serve(
    model: Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']] = None,
    *,
    config: Any = None,
    gpu: Literal['H100-80GB', 'H200-141GB', 'A100-40GB', 'A100-80GB', 'MI250X-64GB', 'MI300X-192GB', 'RTX4090-24GB', 'RTXA6000-48GB'] = 'H100-80GB',
    gpu_memory_utilization: float = 0.92,
    max_model_len: Optional[int] = None,
    max_num_seqs: Optional[int] = None,
    max_num_batched_tokens: Optional[int] = None,
    block_size: int = 16,
    kv_cache_dtype: Literal['auto', 'fp8', 'fp8_e4m3'] = 'auto',
    enforce_eager: bool = False,
    tensor_parallel_size: int = 1,
    find: Optional[Literal['max-model-len', 'max-num-seqs']] = None,
) -> Dict[str, Any]:
    """``vramscope serve``: vLLM 0.33.0's start-up memory plan: available KV cache memory, cache size
    in tokens and maximum concurrency, in vLLM's log words.

    vLLM 0.33.0's start-up memory plan (``enforce_eager=True`` required), or with
    ``find='max-model-len'|'max-num-seqs'`` the inverse question's answer: a dict with ``plan``
    (every term in bytes), ``log`` (vLLM's log lines), ``fits`` and vLLM's ``error`` when it would
    not start.

    Keywords are the command's flags in Python spelling (``context_length=512`` is
    ``--context-length 512``, ``flops=True`` is ``--flops``, a list is a comma list); defaults and
    checks are the command line's. An unknown keyword raises TypeError, a bad value ValueError.

    Parameters
    ----------
    model : Optional[Literal['cs336-small', 'cs336-medium', 'cs336-large', 'xl', '2.7B', 'walkthrough', 'script', 'tiny', 'tinyllama-small', 'tinyllama-medium', 'tinyllama-large', 'very_large', 'Llama-3.2-1B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Mistral-7B', 'Qwen2.5-7B', 'Qwen3-8B', 'Phi-3-mini', 'OLMo-2-7B', 'Gemma-2-9B', 'Gemma-3-27B', 'Mixtral-8x7B', 'Qwen3-30B-A3B', 'gpt-oss-20b', 'gpt-oss-120b', 'DeepSeek-V3', 'Mistral-7B-v0.3']], default None
        Model preset vLLM runs here (Llama-*, Mistral-7B, Qwen2.5-7B, Qwen3-8B, Phi-3-mini,
        OLMo-2-7B, Gemma-*, Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V3, gpt-oss-*) gpt-oss-20b and
        gpt-oss-120b are their MXFP4 checkpoints, planned on H100/H200 (the OAI Triton kernels'
        layout of the experts, derived from source). One of: cs336-small, cs336-medium, cs336-large,
        xl, 2.7B, walkthrough, script, tiny, tinyllama-small, tinyllama-medium, tinyllama-large,
        very_large, Llama-3.2-1B, Llama-3.1-8B, Llama-3.1-70B, Mistral-7B, Qwen2.5-7B, Qwen3-8B,
        Phi-3-mini, OLMo-2-7B, Gemma-2-9B, Gemma-3-27B, Mixtral-8x7B, Qwen3-30B-A3B, gpt-oss-20b,
        gpt-oss-120b, DeepSeek-V3, Mistral-7B-v0.3. [--preset; also preset=]
    config : Any, default None
        A Hugging Face config.json (or a model folder holding one) instead of a preset model_type
        llama, mistral, qwen2, qwen3 or phi3 (a sliding window on every layer or on none), olmo2
        (vLLM's Transformers backend; a float32 checkpoint loads in 16 bits), gemma2 or gemma3_text
        (sliding and full layers in several KV cache groups; on SM 8.x/9.0), the mixture-of-experts
        mixtral, qwen3_moe or qwen2_moe (dense layers by mlp_only_layers or decoder_sparse_step
        allowed; a sliding window slides every layer, or none where Qwen2-MoE's layer_types mix; on
        H100/H200), or deepseek_v3 (multi-head latent attention, the first_k_dense_replace layers
        dense; on H100/H200, bf16 weights without a quantization_config); its torch_dtype (bfloat16
        or float16) is the weights' dtype, as vLLM's --dtype auto keeps it (a float32 Gemma loads in
        bfloat16). Also a dict (a config.json's content) or a transformers ``PretrainedConfig``
        (anything with ``to_dict()``). [--config]
    gpu : Literal['H100-80GB', 'H200-141GB', 'A100-40GB', 'A100-80GB', 'MI250X-64GB', 'MI300X-192GB', 'RTX4090-24GB', 'RTXA6000-48GB'], default 'H100-80GB'
        The NVIDIA GPU (its total as torch.cuda.mem_get_info reports it). One of: H100-80GB,
        H200-141GB, A100-40GB, A100-80GB, MI250X-64GB, MI300X-192GB, RTX4090-24GB, RTXA6000-48GB.
        [--gpu]
    gpu_memory_utilization : float, default 0.92
        Fraction of the GPU's total memory vLLM may use, in (0, 1] (vLLM 0.33.0's default 0.92).
        [--gpu-memory-utilization]
    max_model_len : Optional[int], default None
        Longest request (prompt and output) in tokens (default: the model's
        max_position_embeddings). [--max-model-len]
    max_num_seqs : Optional[int], default None
        Most requests in one batch (default: vllm serve's for the GPU: 1024 on H100/H200, else 256).
        [--max-num-seqs]
    max_num_batched_tokens : Optional[int], default None
        Most tokens in one batch, the profile run's dummy batch (default: vllm serve's: 8192 on
        H100, 16384 from 160 GiB, else 2048). [--max-num-batched-tokens]
    block_size : int, default 16
        Tokens per KV cache block (a multiple of 16, FlashAttention's kernel block sizes).
        [--block-size]
    kv_cache_dtype : Literal['auto', 'fp8', 'fp8_e4m3'], default 'auto'
        KV cache element type: auto (the weights' dtype), or 1-byte fp8 (fp8_e4m3) on H100/H200
        vLLM's FlashAttention backend stores an fp8 cache only with FlashAttention 3 on SM 9.0
        (`flash_attn_supports_kv_cache_dtype`, `v1/attention/backends/fa_utils.py:282`); other GPUs
        and fp8_e5m2 select other attention backends, which are not modelled. DeepSeek-V3's latent
        cache takes auto only (FLASH_ATTN_MLA keeps a 16-bit cache; fp8 falls to FlashMLA, not
        modelled). One of: auto, fp8, fp8_e4m3. [--kv-cache-dtype]
    enforce_eager : bool, default False
        No CUDA graphs (required: the graphs' memory is measured by capturing them on the GPU) vLLM
        0.33.0 subtracts the memory of its CUDA graphs, which it measures by capturing them at
        start-up; without a GPU that term cannot be known, so the plan is made for --enforce-eager,
        where it is 0. [--enforce-eager]
    tensor_parallel_size : int, default 1
        GPUs the model is sharded over (tensor parallelism); the plan is one rank's Weights, KV
        heads and the profile run's MLP are split as vLLM's parallel layers split them (KV heads
        replicated when the ranks outnumber them); every rank gets the same number of blocks. The
        heads, KV heads, intermediate size and padded vocabulary must divide.
        [--tensor-parallel-size]
    find : Optional[Literal['max-model-len', 'max-num-seqs']], default None
        Answer an inverse question instead of planning at the given lengths max-model-len: the
        longest --max-model-len for which one request fits, by vLLM's own search (what `vllm serve
        --max-model-len -1` auto-fits to). max-num-seqs: the largest --max-num-seqs for which that
        many requests of --max-model-len tokens hold their KV cache at once (vLLM itself does not
        cap max_num_seqs by the cache: it queues what does not fit). One of: max-model-len,
        max-num-seqs. [--find]

    Returns
    -------
    Dict[str, Any]
    """

# END generated
