"""A user's Hugging Face Accelerate training loop, written as Accelerate's docs show it (prepare,
accelerator.backward, accelerator.print): an MLP on Fashion-MNIST (train_fashion.py's loader:
the Debian package's files, random tensors where they are missing). Nothing in it knows
DeviceRace. Run as `python accelerate_loop.py` or through `accelerate launch`, which starts it
as a process of its own. The main process writes its steps and samples and its last test
accuracy to --out FILE (JSON)."""
import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

from train_fashion import load

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--samples", type=int, default=12800)
p.add_argument("--out", default="")
a = p.parse_args()

torch.manual_seed(0)
x, y, tx, ty = load(a.samples)
accelerator = Accelerator()
model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
train = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
test = DataLoader(TensorDataset(tx, ty), batch_size=500)
model, optimizer, train, test = accelerator.prepare(model, optimizer, train, test)
steps = samples = 0
for epoch in range(a.epochs):
    model.train()
    for xb, yb in train:
        loss = F.cross_entropy(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        steps, samples = steps + 1, samples + len(xb)
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in test:
            correct += (model(xb).argmax(1) == yb).sum().item()
    accuracy = correct / len(ty)
    accelerator.print(f"epoch {epoch}: test accuracy {accuracy:.4f}")
if accelerator.is_main_process and a.out:
    with open(a.out, "w") as f:
        json.dump({"steps": steps, "samples": samples, "accuracy": accuracy,
                   "processes": accelerator.num_processes}, f)
