"""A user's Lightning Trainer fit() with DeviceRace's callback: a small classifier on random
tensors for --steps steps, with a validation run at the end. --unchanged leaves the callback out
and runs as its user wrote it: the default progress bar, and trainer.validate() after fit(), whose
results table (rich's, in box-drawing characters) is the lane's evaluation. Writes its own counts
(and validate()'s figures) to --out."""
import argparse
import json

import torch
import torch.nn.functional as F
import lightning as L

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--out", default="")
p.add_argument("--unchanged", action="store_true")
a = p.parse_args()
callbacks = []
if not a.unchanged:
    import devicerace.lightning
    callbacks.append(devicerace.lightning.Callback())


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def training_step(self, batch, i):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def validation_step(self, batch, i):
        x, y = batch
        out = self.net(x)
        self.log("val_loss", F.cross_entropy(out, y))
        self.log("val_acc", (out.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


g = torch.Generator().manual_seed(0)
x = torch.rand(a.steps * a.batch, 64, generator=g)
y = x[:, :10].argmax(1)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=a.batch)
val = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:256], y[:256]), batch_size=64)
trainer = L.Trainer(max_epochs=1, accelerator="auto", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=a.unchanged, enable_model_summary=False, num_sanity_val_steps=0,
                    callbacks=callbacks)
net = Net()
trainer.fit(net, data, val)
validated = trainer.validate(net, val)[0] if a.unchanged else {}
if a.out:
    with open(a.out, "w") as f:
        json.dump({"steps": trainer.global_step, "samples": trainer.global_step * a.batch,
                   "val_acc": validated.get("val_acc"), "val_loss": validated.get("val_loss")}, f)
