#!/usr/bin/env python3
"""char-gpt's training step in PyTorch eager at three precisions, 1 thread: fp32, bf16
autocast (fp32 attention on upcast inputs, as the engine's bf16 CPU lanes at T 64), and the whole
model in bf16 (no casts at all; bf16 flash attention). Asks whether removing autocast's casts
alone would make bf16 pay at this size. nanoGPT's block at the engine's shapes (models_gpt.cpp:
4 layers, 4 heads, width 128, context 64, batch 12), fused AdamW; the median of 25 steps after
5, each mode twice, the best run reported.

Usage: .venv/bin/python bench/gpt_bf16_eager.py
"""
import os
import sys
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))
from host import cpu_model  # noqa: E402  (bench/support/host.py)

torch.set_num_threads(1); torch.manual_seed(0)
L,H,C,T,B,V = 4,4,128,64,12,96
class Block(nn.Module):
    def __init__(s):
        super().__init__(); s.ln1=nn.LayerNorm(C); s.attn=nn.Linear(C,3*C); s.proj=nn.Linear(C,C); s.ln2=nn.LayerNorm(C); s.fc=nn.Linear(C,4*C); s.mp=nn.Linear(4*C,C)
    def forward(s,x,attn32):
        q,k,v = s.attn(s.ln1(x)).split(C,dim=2)
        q,k,v = [t.view(B,T,H,C//H).transpose(1,2) for t in (q,k,v)]
        if attn32: y = F.scaled_dot_product_attention(q.float(),k.float(),v.float(),is_causal=True).to(q.dtype)
        else: y = F.scaled_dot_product_attention(q,k,v,is_causal=True)
        x = x + s.proj(y.transpose(1,2).reshape(B,T,C))
        return x + s.mp(F.gelu(s.fc(s.ln2(x))))
class GPT(nn.Module):
    def __init__(s):
        super().__init__(); s.wte=nn.Embedding(V,C); s.wpe=nn.Embedding(T,C); s.blocks=nn.ModuleList([Block() for _ in range(L)]); s.ln=nn.LayerNorm(C)
    def forward(s,idx,attn32):
        x = s.wte(idx)+s.wpe(torch.arange(T))
        for b in s.blocks: x=b(x,attn32)
        return F.linear(s.ln(x), s.wte.weight)
idx=torch.randint(0,V,(B,T)); tgt=torch.randint(0,V,(B,T))
def bench(mode):
    m=GPT()
    if mode == 'pure-bf16':
        m = m.bfloat16()
    opt=torch.optim.AdamW(m.parameters(), lr=1e-3, fused=True)
    def step():
        if mode=='autocast':
            with torch.autocast('cpu',dtype=torch.bfloat16):
                logits=m(idx,True)
        else:
            logits=m(idx, False)
        loss=F.cross_entropy(logits.float().view(-1,V), tgt.view(-1))
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    for _ in range(5): step()
    ts=[]
    for _ in range(25):
        t=time.perf_counter(); step(); ts.append(time.perf_counter()-t)
    return statistics.median(ts)*1e3
print(f"# char-gpt eager step by precision · {cpu_model()} · 1 thread · torch {torch.__version__}")
res={}
for mode in ['fp32','autocast','pure-bf16','fp32','autocast','pure-bf16']:
    res.setdefault(mode,[]).append(bench(mode))
for k,v in res.items(): print(f"{k}: {min(v):.1f} ms a step (runs {', '.join(f'{x:.1f}' for x in v)})")
print("fp32/autocast %.2f  fp32/pure-bf16 %.2f" % (min(res['fp32'])/min(res['autocast']), min(res['fp32'])/min(res['pure-bf16'])))
