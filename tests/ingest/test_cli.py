"""The import commands: exit codes, messages, progress bar, migrations from the CLI."""

from __future__ import annotations

from click.testing import CliRunner

from auditor.cli import main


def _run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_creates_imports_rejects_and_reports(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    assert "the database has no tables yet" in _run("datasets", "create", "d", "--labels", "x,y", "--url", url).output
    assert _run("db", "upgrade", "--url", url).exit_code == 0
    assert "labels ['x', 'y']" in _run("datasets", "create", "d", "--labels", "x,y", "--url", url).output

    good = tmp_path / "good.csv"
    good.write_text("item_id,annotator_id,label\ni1,w1,x\ni1,w2,y\n")
    out = _run("import", "annotations", str(good), "--dataset", "d", "--progress", "--url", url)
    assert out.exit_code == 0 and "imported: batch 1: 2 new annotation(s)" in out.output
    assert "importing good.csv" in out.stderr  # the progress bar, on stderr

    bad = tmp_path / "bad.csv"
    bad.write_text("item_id,annotator_id,label\ni2,w1,x\ni2,w3,maybe\n")
    out = _run("import", "annotations", str(bad), "--dataset", "d", "--url", url)
    assert out.exit_code == 1
    assert "row 2, field 'label': 'maybe' is not one of the dataset's labels ['x', 'y']" in out.output

    out = _run("import", "annotations", str(good), "--dataset", "nope", "--url", url)
    assert out.exit_code == 1 and "unknown dataset 'nope'" in out.output
    out = _run("import", "annotations", str(good), "--dataset", "d", "--field", "item_id", "--url", url)
    assert out.exit_code == 2 and "expected FIELD=COLUMN" in out.output
    assert "d\tlabels=x,y\titems=1\tdata_version=1" in _run("datasets", "list", "--url", url).output
