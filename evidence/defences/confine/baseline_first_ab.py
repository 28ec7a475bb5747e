"""The first pair's order, A/B: python baseline_first_ab.py together|first N (from the repository's root).

Runs honest-win at measure=quick N times in this process through expkit.api.run, with
open_pair's baseline_first forced off ("together") or left on ("first"); prints each run's
start and load stages (result.json's stages)."""
import sys, tempfile, json
import expkit.runner as RN
import expkit.api as api
orig = RN.open_pair
mode = sys.argv[1]
if mode == 'together':
    RN.open_pair = lambda *a, **k: orig(*a, **{**k, 'baseline_first': False})
for i in range(int(sys.argv[2])):
    d = tempfile.mkdtemp()
    r = api.run('manifests/examples/cpu/honest-win.yaml', overrides=['measure=quick'], out=d, plots=False)
    st = json.load(open(d + '/result.json'))['stages']
    print(mode, i, r.verdict, round(st['start'], 3), round(st['load'], 3), flush=True)
