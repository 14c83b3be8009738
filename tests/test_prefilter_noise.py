"""The pure-`re` prefilter (the engine without the Hyperscan wheel) keys each catalogue
pattern on a literal; a literal that healthy training output holds on every line makes
every line a candidate and the scan slow (an anchor "GPU " from an amdgpu row once took
it from ~40 to ~3 MB/s on the benchmark's log). Healthy lines of the frameworks the
catalogue reads must propose nothing."""

from __future__ import annotations

import pytest

from wrapper.classifier.prefilter import Prefilter
from wrapper.classifier.rules import load_rules

PATTERNS = [pattern for rule in load_rules().rules for pattern in rule.patterns]

HEALTHY = [
    # Megatron-LM training_log and its throughput line
    "[default41]:[rank41]: iteration      120/ 10000000 | consumed samples:        15360 | elapsed time per "
    "iteration (ms): 1537.9 | learning rate: 1.499E-04 | lm loss: 1.579294E+00 | loss scale: 1.0 | grad norm: 0.048 |",
    "[default27]: throughput per GPU (TFLOP/s/GPU): 380.4 | tokens/s: 956838",
    "[default7]: saving checkpoint at iteration 3 to /tmp/models (async) ... done, took 1.2 s",
    # NCCL at INFO level
    "dgx-a1:3312:3403 [4] NCCL INFO Channel 01/0 : 12[4] -> 13[5] via P2P/IPC/read",
    "dgx-a1:3312:3403 [4] NCCL INFO comm 0x55b14c3ab100 rank 4 nranks 8 cudaDev 4 busId 65020 - Init COMPLETE",
    # torchelastic's agent, a data loader's progress
    "W1121 03:13:41.177000 6053 torch/distributed/elastic/agent/server/api.py:874] rank 3 heartbeat ok, timeout=1800",
    "\x1b[32m[I 2026-11-21 03:14:07]\x1b[0m rank 46: data loader worker 2 prefetched 8 batches",
    # Hugging Face Trainer, Lightning, DeepSpeed, mmengine, detectron2 progress
    "{'loss': 1.2345, 'grad_norm': 0.51, 'learning_rate': 1.9e-05, 'epoch': 0.4}",
    " 40%|####      | 400/1000 [02:13<03:20,  3.00it/s]",
    "Epoch 3: 100%|##########| 500/500 [01:40<00:00,  5.00it/s, v_num=0, train_loss=0.512]",
    "[2026-11-21 03:14:07,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=200, skipped=0, lr=[1e-05], mom=[(0.9, 0.95)]",
    "11/25 03:15:42 - mmengine - INFO - Iter(train) [  50/20000]  base_lr: 1.0e-02 lr: 1.0e-02  eta: 9:01:12  time: 1.6",
    "[03/11 09:45:14 d2.utils.events]:  eta: 0:00:06  iter: 79  total_loss: 0.2874    time: 0.3191  max_mem: 2014M",
    # LLaMA-Factory's trainer_log.jsonl, mistral-finetune
    '{"current_steps": 8650, "total_steps": 8660, "loss": 0.1166, "learning_rate": 2.03e-10, "epoch": 3.995, '
    '"percentage": 99.88, "elapsed_time": "5:39:22", "remaining_time": "0:00:23"}',
    "2024-05-24 19:32:05 (UTC) - 0:33:53 - train - INFO - step: 000090 - done (%): 90.0 - loss: 0.834",
    # the HF Trainer's step dict as recent ProgressCallbacks print it (quoted .4g floats)
    "{'loss': '3.898', 'grad_norm': '0.8704', 'learning_rate': '5e-05', 'epoch': '0.0625'}",
    # GPU telemetry a training script prints
    "GPU 0: NVIDIA H100 80GB HBM3 | memory used 61234 MiB / 81559 MiB | utilization 97%",
]


@pytest.mark.parametrize("line", HEALTHY)
def test_a_healthy_line_proposes_no_candidate(line: str) -> None:
    assert not Prefilter(PATTERNS).may_match(line), line
