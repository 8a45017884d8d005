"""Differential check of vramscope's config.json reader (`--config`) against transformers itself.

Random edits of the shipped configs (tests/fixtures/hf_models) at a small shape are read by
transformers 5.23.0 (`CONFIG_MAPPING[model_type](**fields)`, then the model built on meta) and by
`vramscope profile --config` (the model in summary.json); the derived facts are compared: kv heads,
head_dim, max positions, rope theta and type, the effective sliding window, biases, tied head,
use_cache, eps. Usage: python3 tools/pytorch/check_hf_config_reader.py [path/to/vramscope] [N]
"""
import json, random, subprocess, os, sys, tempfile, warnings, logging
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
import transformers
transformers.logging.set_verbosity_error()
from transformers import AutoConfig, CONFIG_MAPPING
random.seed(11)
ROOT=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B=sys.argv[1] if len(sys.argv)>1 else os.path.join(ROOT,"target/release/vramscope")
N=int(sys.argv[2]) if len(sys.argv)>2 else 300
base_dir=os.path.join(ROOT,"tests/fixtures/hf_models")
TMP=tempfile.mkdtemp(prefix="hfcfg-")
bases=[json.load(open(f"{base_dir}/{m}/config.json")) for m in sorted(os.listdir(base_dir))]
VALS={
 "num_key_value_heads":[None,"DEL",1,2,4,8],
 "head_dim":[None,"DEL",32,64,128],
 "max_position_embeddings":["DEL",4096],
 "rope_theta":["DEL",10000.0,123.0],
 "rope_scaling":["DEL",None,{},{"rope_type":"linear","factor":2.0},{"type":"linear","factor":2.0,"rope_theta":77.0},{"rope_type":"default"}],
 "rope_parameters":["DEL",{"rope_type":"default","rope_theta":55.0},{"rope_type":"yarn","factor":4.0}],
 "tie_word_embeddings":["DEL",True,False],
 "attention_bias":["DEL",True,False],
 "mlp_bias":["DEL",True,False],
 "sliding_window":["DEL",None,64,4096],
 "use_sliding_window":["DEL",True,False],
 "max_window_layers":["DEL",0,2,100],
 "use_cache":["DEL",True,False],
 "model_type":["llama","mistral","qwen2","qwen3"],
 "rms_norm_eps":["DEL",1e-5],
}
def ours(cfg):
    p=os.path.join(TMP,"c.json"); json.dump(cfg,open(p,"w"))
    r=subprocess.run([B,"profile","--config",p,"--device","meta","--profile-type","inference","--context-length","4","--batch-size","1","--warmup-steps","0","--out-dir",os.path.join(TMP,"out")],capture_output=True,text=True)
    if r.returncode!=0: return ("ERR", r.stderr.strip().splitlines()[-1])
    m=json.load(open(os.path.join(TMP,"out","summary.json")))["model"]; h=m["hf"]
    return (m["num_kv_heads"],h["head_dim"],m["max_seq_len"],float(m["rope_theta"]),h["sliding_window"],h["qkv_bias"],h["o_bias"],h["mlp_bias"],m["tied_embeddings"],h["use_cache"],m["norm_eps"],h["rope_type"] or "default")
def theirs(cfg):
    c=dict(cfg); mt=c.pop("model_type")
    try:
        conf=CONFIG_MAPPING[mt](**{k:v for k,v in c.items()})
    except Exception as e:
        return ("ERR", type(e).__name__+": "+str(e).splitlines()[0][:120])
    from transformers import AutoModelForCausalLM
    import torch
    try:
        with torch.device("meta"):
            m=AutoModelForCausalLM.from_config(conf)
    except Exception as e:
        return ("ERR", "build "+type(e).__name__+": "+str(e).splitlines()[0][:120])
    a=m.model.layers[0].self_attn
    hd=a.head_dim
    sw=getattr(a,"sliding_window",None)
    if mt in("qwen2","qwen3"):
        types=set(conf.layer_types)
        if len(types)>1: return ("MIXED",)
        sw = conf.sliding_window if types=={"sliding_attention"} else None
    if mt=="llama": sw=None
    if mt=="mistral": sw=conf.sliding_window
    rp=conf.rope_parameters
    return (conf.num_key_value_heads,hd,conf.max_position_embeddings,float(rp["rope_theta"]),sw,a.q_proj.bias is not None,a.o_proj.bias is not None,m.model.layers[0].mlp.gate_proj.bias is not None,conf.tie_word_embeddings,conf.use_cache,conf.rms_norm_eps,rp["rope_type"])
agree=dis=both_err=0; notes=[]
for i in range(N):
    cfg=json.loads(json.dumps(random.choice(bases)))
    cfg["num_hidden_layers"]=4; cfg["hidden_size"]=256; cfg["intermediate_size"]=512; cfg["num_attention_heads"]=8; cfg["vocab_size"]=100
    if "head_dim" in cfg: cfg["head_dim"]=32
    cfg.pop("num_key_value_heads",None) if random.random()<0.2 else cfg.__setitem__("num_key_value_heads",random.choice([1,2,4,8]))
    for k in random.sample(list(VALS),4):
        v=random.choice(VALS[k])
        if v=="DEL": cfg.pop(k,None)
        else: cfg[k]=v
    a=ours(cfg); b=theirs(cfg)
    if a[0]=="ERR" or b[0] in("ERR","MIXED"):
        if a[0]=="ERR" and b[0] in("ERR","MIXED"): both_err+=1
        else: dis+=1; notes.append((cfg,a,b))
    elif a==b: agree+=1
    else: dis+=1; notes.append((cfg,a,b))
print("agree",agree,"both refuse",both_err,"differ",dis,"(vramscope refuses num_key_value_heads > num_attention_heads, which transformers builds but cannot run)")
for n in notes[:100]: print(json.dumps(n[0],sort_keys=True)[:400]); print("  ours  ",n[1]); print("  theirs",n[2])
