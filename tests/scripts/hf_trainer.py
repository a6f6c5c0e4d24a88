"""A user's Hugging Face Trainer run with DeviceRace's callback: a tiny GPT-2 built from a config
(random weights, no download) trained on random tokens for --steps steps, evaluated at the end.
--unchanged leaves the callback out (the script as its user wrote it: the hooks count it, and its
printed eval_loss is the evaluation). Writes its own counts to --out FILE (JSON)."""
import argparse
import json
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--out", default="")
p.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
p.add_argument("--unchanged", action="store_true")
a = p.parse_args()
callbacks = []
if not a.unchanged:
    import devicerace.transformers
    callbacks.append(devicerace.transformers.Callback())


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seq=32):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 128, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2))
args = TrainingArguments(output_dir=os.path.join(a.dir, "hf-out"), max_steps=a.steps,
                         per_device_train_batch_size=a.batch, per_device_eval_batch_size=a.batch, report_to=[],
                         logging_steps=10, save_strategy="no", use_cpu=not torch.cuda.is_available(),
                         dataloader_num_workers=0, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(a.steps * a.batch), eval_dataset=Tokens(32),
                  callbacks=callbacks)
trainer.train()
metrics = trainer.evaluate()
if a.out:
    with open(a.out, "w") as f:
        json.dump({"steps": trainer.state.global_step, "samples": trainer.state.global_step * a.batch,
                   "eval_loss": metrics["eval_loss"]}, f)
