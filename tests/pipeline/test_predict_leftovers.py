"""Issue 62, item 4: ``kill -9`` of ``pep predict`` left its hidden, half-written output (``.NAME.predict-…``)
that no later run removed. Now the output is written under a lock, as an ingest's staging directory is: the
next predict to the same ``--out`` removes a killed one's leftovers and keeps a running one's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from pep_gp.pipeline.runs.predict import predict

WRITER = ("import os, signal, sys; from pathlib import Path; import pandas as pd\n"
          "from pep_gp.pipeline.data.predictions import open_output\n"
          "with open_output(Path(sys.argv[1]), False) as writer:\n"
          "    writer.write(pd.DataFrame({'label': ['yes'] * 3})); print(writer.path, flush=True)\n"
          "    os.kill(os.getpid(), signal.SIGKILL if sys.argv[2] == 'die' else signal.SIGSTOP)\n")


@pytest.mark.heavy
def test_a_killed_predicts_output_is_removed_by_the_next(messy_classifier, tmp_path):
    out = tmp_path / "p.csv"
    alive = subprocess.Popen([sys.executable, "-c", WRITER, str(out), "stop"], stdout=subprocess.PIPE, text=True)
    try:
        live = alive.stdout.readline().strip()
        dead = subprocess.run([sys.executable, "-c", WRITER, str(out), "die"], capture_output=True, text=True)
        assert dead.returncode == -signal.SIGKILL and os.path.isfile(dead.stdout.strip())  # what kill -9 leaves
        summary = predict(messy_classifier.run_dir, messy_classifier.new_csv, out, sep=";")
        assert summary.rows == 50 and out.exists()
        assert not os.path.exists(dead.stdout.strip())  # swept
        assert os.path.isfile(live)  # still being written by a running predict
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["p.csv", os.path.basename(live),
                                                                     os.path.basename(live) + ".lock"])
    finally:
        alive.kill()
        alive.wait()
        alive.stdout.close()
