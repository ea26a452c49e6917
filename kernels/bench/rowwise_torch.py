#!/usr/bin/env python3
"""Eager PyTorch on the shapes of verifuse_rowwise_bench (kernels/bench/rowwise_bench.cpp), 1 thread,
thread CPU time, median [best] of 30 samples of >= 2 ms; for the table in kernels/README.md.

    taskset -c 0 python3 kernels/bench/rowwise_torch.py
"""
import torch, time, torch.nn.functional as F
torch.set_num_threads(1)
def bench(name, f, nbytes, reps=30):
    f()
    ts=[]
    for _ in range(reps):
        t0=time.thread_time(); n=0
        while True:
            f(); n+=1
            t=time.thread_time()
            if t-t0>2e-3: break
        ts.append((t-t0)/n)
    ts.sort(); med=ts[len(ts)//2]
    print(f"{name:36s} torch {med*1e6:8.1f} us [{ts[0]*1e6:7.1f}] {nbytes/med*1e-9:6.2f} GB/s")
x=torch.randn(128,768); r=torch.randn(128,768); g=torch.rand(768)+.5; b=torch.randn(768)
bench("layernorm 128x768", lambda: F.layer_norm(x,(768,),g,b), 4*(2*128*768+2*768))
bench("layernorm(x+r) 128x768 (+h out)", lambda: F.layer_norm(x+r,(768,),g,b), 4*(4*128*768+2*768))
s=torch.randn(12,128,128); m=torch.rand(1,128,128)-1
bench("softmax(x*s+mask) 12x128x128", lambda: torch.softmax(s*0.125+m,-1), 4*(2*12*128*128+128*128))
s2=torch.randn(12,64,64); cm=torch.ones(64,64,dtype=torch.bool).tril()
bench("softmax(where(causal)) 12x64x64", lambda: torch.softmax(torch.where(cm, s2*0.125, float('-inf')),-1), 4*2*12*64*64+64*64)
a=torch.randn(128,3072)
bench("gelu_erf 128x3072", lambda: F.gelu(a), 4*2*128*3072)
bench("gelu_tanh 128x3072", lambda: F.gelu(a,approximate='tanh'), 4*2*128*3072)
def rms(h,w,eps=1e-6):
    v=h.pow(2).mean(-1,keepdim=True); return w*(h*torch.rsqrt(v+eps))
for R,C in ((64,512),(128,4096)):
    h=torch.randn(R,C); w=torch.rand(C)+.5
    bench(f"rmsnorm {R}x{C}", lambda: rms(h,w), 4*(2*R*C+C))
ga=torch.randn(64,1408); up=torch.randn(64,1408)
bench("silu(a)*b 64x1408", lambda: F.silu(ga)*up, 4*3*64*1408)
q=torch.randn(1,8,64,64); cos=torch.randn(1,1,64,64); sin=torch.randn(1,1,64,64)
def rot(x): return torch.cat((-x[...,32:], x[...,:32]),-1)
bench("rotary 8x64x64 (cos/sin 64x64)", lambda: q*cos+rot(q)*sin, 4*(2*8*64*64+2*64*64))
