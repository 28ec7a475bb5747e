"""The two sides: one side's code in its worker process, and the parent that drives the pair.

In a worker (:mod:`.worker`): one side's code, inputs and calls (:mod:`.side`), answered
request by request with plain data (:mod:`.serve`); on the baseline's side, the judge of the
candidate's outputs (:mod:`.judge`); each worker's half of the model-level oracles
(:mod:`.model_side`) and of the end-to-end workload (:mod:`.workload_side`); the memory plan
(:mod:`.memory_plan`) and what each request cost (:mod:`.ledger`). In the parent: its handle on
one side, a worker or the side in-process (:mod:`.endpoint`; what the workers fork from,
:mod:`.preload`); the pair that drives both (:mod:`.pair`), with the preflight it drives
(:mod:`.preflight_run`) and the workload's parent half (:mod:`.workload_pair`); one case's two
sides for the measurement loop (:mod:`.case_sides`); a fresh pair per replicate
(:mod:`.replicates`); each timed call's kernels against the profiled call's, judged in the
parent (:mod:`.launches`); and both sides as callables in this process (:mod:`.in_process`).
The sides build on :mod:`..processes` and :mod:`..defences`, which import nothing of them.
"""
