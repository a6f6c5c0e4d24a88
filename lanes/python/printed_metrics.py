"""Evaluation figures read from the lines a training script prints (a script lane's printed
figures, README "Race your own training"): held-out accuracy and loss as scripts and frameworks
print them, e.g.

    step 200: loss 0.523, test accuracy 0.835                     a plain loop
    ... - loss: 0.52 - val_accuracy: 0.8512 - val_loss: 0.4123     Keras fit()
    {'eval_loss': 0.41, 'eval_accuracy': 0.85, 'epoch': 1.0}       a Hugging Face Trainer
    {'eval_loss': '0.41', 'eval_runtime': '0.01', 'epoch': '1'}    ... of transformers 5
    │         val_loss          │    0.4123     │                  Lightning's validate() table
    Test set: Average loss: 0.0319, Accuracy: 9898/10000 (99%)     pytorch/examples' MNIST
     * Acc@1 76.130 Acc@5 92.862                                    pytorch/examples' ImageNet
    test error: 0.0706                                              an error rate: 1 - accuracy
    Test Error:                                                     PyTorch's quickstart tutorial:
     Accuracy: 64.1%, Avg loss: 1.089                               a heading, its figures below

Only figures named for held-out data count (test, val, valid, validation, eval, dev): a training
accuracy or loss is never taken for one. Nothing read is ever run; a line is only matched.
"""
import re

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_HELD_OUT = r"(?:test|val|valid|validation|eval|evaluation|dev)"
_ACCURACY = r"(?:accuracy|acc|top[-_ ]?1)"
# "val_accuracy: 0.85", "test acc 85.1%", "'eval_loss': 0.41", "Validation Loss = 0.4", the
# quoted values of transformers 5's log lines ("'eval_loss': '4.708'"), and a table's row
# ("│ val_loss │ 0.41 │", Lightning's validate() and test() results with rich; "| val_loss | 0.41 |")
_NAMED = re.compile(r"(?<![A-Za-z])" + _HELD_OUT + r"[\s_\-/.]*(?:set[\s_\-/.:]*)?(?:average[\s_\-]*)?(" +
                    _ACCURACY + r"|loss)(?![A-Za-z_])['\"]?\s*[:=|\u2502\u2503]?\s*['\"]?" + _NUMBER + r"(\s*%)?",
                    re.IGNORECASE)
# A line about a held-out set ("Test set: Average loss: 0.0319, Accuracy: 9898/10000 (99%)"): its
# figures need not be next to the set's name.
_SET_LINE = re.compile(r"(?<![A-Za-z])" + _HELD_OUT + r"(?:ation)?\s+set\b", re.IGNORECASE)
_SET_LOSS = re.compile(r"(?<![A-Za-z])loss(?![A-Za-z_])\W{0,3}" + _NUMBER, re.IGNORECASE)
_SET_FRACTION = re.compile(r"(?<![A-Za-z])" + _ACCURACY + r"(?![A-Za-z_])\W{0,3}(\d+)\s*/\s*(\d+)", re.IGNORECASE)
_SET_ACCURACY = re.compile(r"(?<![A-Za-z])" + _ACCURACY + r"(?![A-Za-z_])\W{0,3}" + _NUMBER + r"(\s*%)?",
                           re.IGNORECASE)

# An error rate named for held-out data ("test error: 0.0706", "val_err=12.5%"): 1 - accuracy.
_ERROR = re.compile(r"(?<![A-Za-z])" + _HELD_OUT + r"[\s_\-/.]*(?:set[\s_\-/.:]*)?(?:error|err)(?:[\s_\-]*rate)?"
                    r"(?![A-Za-z_])['\"]?\s*[:=|\u2502\u2503]?\s*['\"]?" + _NUMBER + r"(\s*%)?", re.IGNORECASE)
# A line that only names a held-out set ("Test Error:", "Validation:", "Evaluation results"): the
# figures of the line after it are that set's ("Test Error: \n Accuracy: 64.1%, Avg loss: 1.089").
_HEADING = re.compile(r"^\W*" + _HELD_OUT + r"(?:ation)?(?:[\s_\-]+(?:set|error|results?|metrics))?\s*:?\s*$",
                      re.IGNORECASE)

# pytorch/examples' ImageNet main.py: its validation's summary, in percent (" * Acc@1 76.130 Acc@5
# 92.862"); the running figures of its "Test: [ 10/196]" lines are not an evaluation's result.
_TOP1_SUMMARY = re.compile(r"^\s*\*\s*Acc@1\s+" + _NUMBER + r"\s+Acc@5\s+" + _NUMBER + r"\s*$")


def _value(number, percent):
    v = float(number)
    return v / 100 if percent and percent.strip() else v


def figures(line, previous=""):
    """(accuracy, loss) named in `line` for held-out data, each None where the line has none;
    `previous`, the line printed before it on the same stream, may be a heading that names them."""
    accuracy = loss = None
    for m in _NAMED.finditer(line):
        v = _value(m.group(2), m.group(3))
        if m.group(1).lower() == "loss":
            loss = v if loss is None else loss
        elif accuracy is None:
            accuracy = v
    if accuracy is None and (m := _ERROR.search(line)) is not None:
        error = _value(m.group(1), m.group(2))
        accuracy = 1 - error if 0 <= error <= 1 else None
    held_out = _SET_LINE.search(line) or (accuracy is None and loss is None and _HEADING.match(previous))
    if (accuracy is None or loss is None) and held_out:
        if loss is None and (m := _SET_LOSS.search(line)) is not None:
            loss = float(m.group(1))
        if accuracy is None:
            m = _SET_FRACTION.search(line)
            if m and int(m.group(2)) > 0:
                accuracy = int(m.group(1)) / int(m.group(2))
            elif (m := _SET_ACCURACY.search(line)) is not None:
                accuracy = _value(m.group(1), m.group(2))
    if accuracy is None and (m := _TOP1_SUMMARY.match(line)) is not None:
        accuracy = float(m.group(1)) / 100
    return accuracy, loss
