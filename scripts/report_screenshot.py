"""Regenerate docs/report-screenshot.png, the README's picture of `async-pbt report`, from the page the report test
checks (tests/integration/test_report_page.py): a real four-member CPU population with an in-process exploit, an
exploit by restart and explores (`run_mixed_population`), two checkpoints per member evaluated and recorded by
`async-pbt evaluate`, the report opened in headless Chromium and photographed down to the hyperparameters.

    python scripts/report_screenshot.py                    # trains the population (2-4 minutes on 2 cores)
    python scripts/report_screenshot.py --workspace WS     # the report of an existing workspace instead

Needs the `test` extra (playwright, matplotlib) and Chromium (`apt-get install chromium`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from async_pbt_isaaclab.testing.report_page import evaluated_report, find_chromium, open_report

OUT = Path(__file__).resolve().parents[1] / "docs" / "report-screenshot.png"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=None, help="report this workspace (default: train one)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the PNG to write (default: {OUT})")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print("report_screenshot: chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="report-screenshot-") as tmp:
        root = Path(tmp)
        ws = args.workspace
        if ws is None:
            from async_pbt_isaaclab.testing.forced_exploit import run_mixed_population

            (root / "population").mkdir()
            run_mixed_population(
                root / "population",
                (
                    "agent.pbt.mutation.learning_rate=mutate_float",
                    "agent.pbt.mutation.entropy_coef=mutate_float",
                    "agent.pbt.mutation.gamma=mutate_discount",
                ),
            )
            ws = root / "population" / "ws"
        (root / "report").mkdir()
        html = evaluated_report(ws, root / "report")
        shot = root / "report.png"
        page = open_report(html, chromium, shot, clip_to_section="hyperparameters")
        if page.problems:
            print("report_screenshot: the page has problems:\n  " + "\n  ".join(page.problems), file=sys.stderr)
            return 1
        shutil.copyfile(shot, args.out)
    print(f"report_screenshot: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
