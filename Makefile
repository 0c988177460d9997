# Two commands on a fresh machine: `make course` and `make test`. Each creates .venv if needed.
PY := .venv/bin/python
STACK := .venv/.stack-installed
export PYTHONHASHSEED := 0
export TOKENIZERS_PARALLELISM := false

.PHONY: course test test-fast test-release lint bench figures sync-notebooks execute-notebooks lock gpu-check clean site

$(STACK): requirements.txt requirements-dev.txt scripts/install_stack.py $(wildcard locks/*.txt)
	python3 -m scripts.install_stack venv

## Execute every notebook in order, headless, with the profile the hardware calls for.
course: $(STACK)
	$(PY) -m scripts.run_course

## The session's options: the smoke profile on any machine, two processes, each group whole to one
## process, the longest first (conftest.py; tools/test_groups.py says what a group and a tier are).
PYTEST := GRPO_PROFILE=smoke $(PY) -m pytest --nbval-lax --nbval-current-env \
	-n 2 --dist loadscope --no-loadscope-reorder -p no:randomly

## Lint, then the unit tests and every notebook (nbval) in one session: what a newcomer runs.
## The release checks are left out: .ci/run runs them after this (docs/ci.md lists the tiers).
test: $(STACK) lint
	$(PYTEST) tests notebooks -m "not release"

## While you work (about 2 minutes): `make test` without its longest groups (docs/ci.md).
test-fast: $(STACK) lint
	$(PYTEST) tests notebooks -m "not release" --fast

## The release checks (about 5 minutes more): .ci/run runs them after `make test`.
test-release: $(STACK)
	$(PYTEST) tests -m release

lint: $(STACK)
	$(PY) -m ruff check conftest.py helpers tools tests scripts bench notebooks
	$(PY) -m scripts.sync_notebooks --check

## Benchmarks: each prints its figures and writes runs/bench/<name>.json; then README follows them.
bench: $(STACK)
	$(PY) -m bench.run_all
	$(PY) -m scripts.figures

## Rewrite every <!-- fig:KEY -->VALUE<!-- /fig --> in README and notebook prose from its source
## (runs/bench/*.json, helpers/profiles.py): see tools/cited_numbers.py. `--check` only compares.
figures: $(STACK)
	$(PY) -m scripts.figures

## On a CUDA GPU (a Colab T4 before a release): run the t4 path's GPU-only calls, timed, and write
## runs/gpu-check/<gpu>.json (on a T4 it also fills README's T4 slot). Refuses on a CPU.
gpu-check: $(STACK)
	$(PY) -m scripts.gpu_check

## Copy helpers/course.py's repository URL into every notebook's badge and bootstrap cell.
sync-notebooks: $(STACK)
	$(PY) -m scripts.sync_notebooks

## Resolve the GPU stack again and rewrite locks/t4.txt and locks/ampere.txt (needs PyPI).
lock: $(STACK)
	$(PY) -m scripts.lock_stack

## Re-execute the committed notebooks in place (smoke profile), so stored outputs match the code.
## Also records each notebook's seconds in runs/bench/course_times.json, then fills the headers.
execute-notebooks: $(STACK)
	GRPO_PROFILE=smoke $(PY) -m scripts.run_course --in-place
	$(PY) -m scripts.figures

## runs/bench/ stays: its JSON files are committed (the figures README cites).
clean:
	rm -rf .venv .cache _site $(filter-out runs/bench,$(wildcard runs/*))

## The course as a static web book in _site/ (open _site/index.html, or serve the folder): README,
## the notebooks with their stored outputs (never executed) and docs/. Offline; tests/test_site.py.
site: $(STACK)
	$(PY) -m scripts.build_site
