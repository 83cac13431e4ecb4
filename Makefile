# hpcops.slinky: one entry point for set-up, checks and the demo.
# `make test` and `make demo` do every set-up step they need on a fresh machine.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Debian's Python 3.11, built with PGO and LTO: site.yml takes 15 % less CPU on it than on a
# plain source build of 3.11 such as pyenv's (measured on the lab), and most of the suite is
# Ansible. Another 3.11 or newer works too: make PYTHON=python3.12.
PYTHON ?= /usr/bin/python3.11
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
BUILD := $(CURDIR)/.build
# The collection must sit at ansible_collections/<namespace>/<name> for ansible and
# ansible-test. Playbooks and pytest use a symlink; ansible-test gets a real copy
# because it resolves symlinks and then no longer finds the ansible_collections parent.
COLLECTIONS := $(BUILD)/collections
COLLECTION_LINK := $(COLLECTIONS)/ansible_collections/hpcops/slinky
SANITY_ROOT := $(or $(TMPDIR),/tmp)/hpcops-slinky-sanity/ansible_collections/hpcops/slinky
VERSION := $(shell sed -n 's/^version: *//p' galaxy.yml)
TARBALL := $(BUILD)/dist/hpcops-slinky-$(VERSION).tar.gz
# Every plugin the built tarball must carry (build-check reads their docs from it).
EXPECTED_PLUGINS := slurm_info slurm_node slurm_job slurm_accounting_info lending_report mariadb_resource mariadb_storage_problems metallb_pool_problems metallb_resources load_balancer_problems login_address_problems slurm_cluster_directory_objects slurm_login_sets_not_ready slurm_login_services_pending slurm_login_addresses slurm_bridge_pool slurm_bridge_problems slurm_bridge_node_marks secret_rollout slurm admission_check hostlist_expand hostlist_compress helm_chart_args slurm_cluster_values slurm_cluster_autoscaling handover_check handover_plan lease node_handover handover_status_table handover_plan_table handover_run_summary handover_metrics handover_summary_line handover_settings_problems jwt_expiry node_preflight_facts containerd_cri_options node_preflight node_preflight_report node_prep_inventory_problems node_prep_sysctl_values show_table nodeset_rollout_pending statefulset_rollout_pending slurm_nodes_not_back

export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH := true
export PATH := $(BIN):$(PATH)
# Modules run on localhost with the virtualenv, which has their Python libraries.
export ANSIBLE_PYTHON_INTERPRETER := $(BIN)/python

.PHONY: FORCE help deps setup lint docs-lint docs sanity units integration build-check changelog-lint ee-check test demo clean \
	lab-up lab-down lab-status k8s-binaries kind-images kind-down record-slurm-fixtures benchmarks

help:
	@echo "make demo   build and install the collection, show its plugins and run a playbook with them"
	@echo "make test   the whole suite: lint, sanity, galaxy build check, unit and integration tests"
	@echo "make setup  the virtualenv (.venv) and the collection link used by the other targets"
	@echo "make docs   the collection's docsite (antsibull-docs, offline) in .build/docsite"
	@echo "Parts of test: lint sanity build-check changelog-lint ee-check units integration"
	@echo "The lab (root): lab-up lab-down lab-status; record-slurm-fixtures re-records unit fixtures"
	@echo "kind (root): kind-images builds every image molecule's kind scenarios need; kind-down stops dockerd"

# The venv is rebuilt when a requirements file changes, and made again from scratch when it
# was made from another interpreter than $(PYTHON).
VENV_PYTHON := $(shell readlink -f "$$(command -v $(PYTHON))" 2>/dev/null)
FORCE:

$(VENV)/.python: FORCE
	@test -n "$(VENV_PYTHON)" || { echo "$(PYTHON) not found: install python3.11 or set PYTHON" >&2; exit 1; }
	@echo "$(VENV_PYTHON)" | cmp -s - $@ || { \
	  test ! -d $(VENV) || echo ">> $(VENV) was made from another Python: making it again"; \
	  rm -rf $(VENV); mkdir -p $(VENV); echo "$(VENV_PYTHON)" > $@; }

$(BIN)/.installed: requirements.txt requirements-dev.txt $(VENV)/.python
	@test -x $(BIN)/python || { echo ">> creating $(VENV) with $(VENV_PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo ">> installing pinned Python requirements into $(VENV)"
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip==25.3
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

# Debian packages of the host (the lab needs root; apt-get runs only when one is missing).
deps:
	@bash tests/lab/install-debian-packages.sh

$(COLLECTION_LINK):
	@mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

setup: deps $(BIN)/.installed $(COLLECTION_LINK)

lint: setup
	@echo ">> ruff"
	ruff check .
	ruff format --check .
	@echo ">> mypy (plugins, read through the collection link so imports resolve once)"
	mypy $(COLLECTION_LINK)/plugins
	@echo ">> yamllint"
	yamllint --strict .
	@echo ">> ansible-lint (production profile)"
	ansible-lint --profile production
	@$(MAKE) --no-print-directory docs-lint

# The plugins' DOCUMENTATION, EXAMPLES and RETURN, the filters' docs, the roles' argument
# specs and docs/docsite/*.yml as antsibull-docs reads them for the docsite (about 10 s).
docs-lint: setup
	@echo ">> antsibull-docs lint-collection-docs --plugin-docs"
	antsibull-docs lint-collection-docs --plugin-docs .
	@echo ">> README.md's table of contents is written from the plugins' docs"
	$(BIN)/python docs/readme_contents.py --check

# The docsite: module, filter, inventory and role docs from their own DOCUMENTATION and
# argument specs. antsibull-docs writes the Sphinx project; its intersphinx fetches are
# replaced by docs/docsite/ansible_links.py, so the build is strict (-W) and offline.
DOCSITE := $(BUILD)/docsite
docs: setup
	@rm -rf $(DOCSITE) && mkdir -p $(DOCSITE)
	antsibull-docs sphinx-init --use-current --fail-on-error --dest-dir $(DOCSITE) \
	  --project hpcops.slinky --copyright "hpcops.slinky contributors" \
	  --title "hpcops.slinky: Slinky (Slurm on Kubernetes) on bare metal" --html-short-title hpcops.slinky \
	  hpcops.slinky > /dev/null
	printf '%s\n' '' '# make docs: offline, links to docs.ansible.com resolved by name' \
	  'import sys' 'sys.path.insert(0, "$(CURDIR)/docs/docsite")' \
	  'extensions.append("ansible_links")' 'intersphinx_mapping = {}' >> $(DOCSITE)/conf.py
	$(DOCSITE)/build.sh
	@echo ">> the docsite: $(DOCSITE)/build/html/index.html"

# ansible-test sees exactly what git would ship: tracked files plus new, not ignored ones.
sanity: setup
	@echo ">> ansible-test sanity (Python 3.11) on a copy at $(SANITY_ROOT)"
	$(BIN)/python -c 'from ansible_test._internal.python_requirements import get_venv_packages as v; print(v(type("P", (), {"version": "3.11"})())["pip"])' | \
	  { read -r pip; dest=~/.ansible/test/cache/get_pip_$${pip//./_}.py; \
	    test -e $$dest || install -D -m 0644 tests/sanity/get_pip_offline.py $$dest; }
	@rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_ROOT)
	git ls-files -z --cached --others --exclude-standard | \
	  xargs -0 -I{} sh -c 'test -e "{}" && cp --parents -P "{}" "$(SANITY_ROOT)/" || true'
	cd $(SANITY_ROOT) && ansible-test sanity --python 3.11 --requirements --color no $(SANITY_ARGS)

# Build the tarball as Galaxy would, install it into an empty path and read the docs
# back from there: a file missing from the build shows up here.
build-check: setup
	@echo ">> ansible-galaxy collection build and install of the tarball"
	@rm -rf $(BUILD)/dist $(BUILD)/installed && mkdir -p $(BUILD)/dist
	ansible-galaxy collection build --force --output-path $(BUILD)/dist .
	ANSIBLE_COLLECTIONS_PATH=$(BUILD)/installed ansible-galaxy collection install --no-deps --force -p $(BUILD)/installed $(TARBALL)
	for type in module inventory filter; do \
	  ANSIBLE_COLLECTIONS_PATH=$(BUILD)/installed ansible-doc -l hpcops.slinky -t $$type; \
	done | tee $(BUILD)/plugins.txt
	for plugin in $(EXPECTED_PLUGINS); do \
	  grep -q "^hpcops.slinky.$$plugin " $(BUILD)/plugins.txt || { echo "missing from the tarball: $$plugin"; exit 1; }; \
	done
	ANSIBLE_COLLECTIONS_PATH=$(BUILD)/installed ansible-doc -t filter hpcops.slinky.hostlist_expand > /dev/null

changelog-lint: setup
	antsibull-changelog lint

# ansible-builder writes the build context without building, which validates the file.
ee-check: setup
	@echo ">> execution-environment.yml: schema check through ansible-builder create"
	ansible-builder create --file execution-environment.yml --context $(BUILD)/ee-context --output-filename Containerfile > /dev/null
	test -s $(BUILD)/ee-context/Containerfile

units: setup
	pytest tests/unit

integration: setup
	pytest tests/integration

# The checks, the Slurm lab with the kind scenarios, and the other tests run at once, after
# the lab's and kind's builds have started in the background (tests/run_suite.py says how).
test: deps
	@$(PYTHON) tests/run_suite.py

# The Kubernetes lab's Go builds (most of a cold demo) start first, in the background, while
# the virtualenv, the tarball and the Slurm lab are made; `k8s_lab.py up` then waits on their
# locks for what is not built yet.
DEMO_BUILDS_LOG := $(BUILD)/demo-lab-builds.log
demo: deps
	@mkdir -p $(BUILD)
	@echo ">> the Kubernetes lab's builds, in the background (log: $(DEMO_BUILDS_LOG))"
	$(K8S_LAB) build --deployed-release-only > $(DEMO_BUILDS_LOG) 2>&1 &
	@$(MAKE) --no-print-directory setup build-check
	@echo ">> plugins of hpcops.slinky, read from the installed tarball"
	@cat $(BUILD)/plugins.txt
	@echo ">> the host list filters on a Slurm node list"
	ANSIBLE_COLLECTIONS_PATH=$(BUILD)/installed ansible localhost -m ansible.builtin.debug \
	  -a "msg={{ 'node[01-04,07],gpu[1-2]' | hpcops.slinky.hostlist_expand }}"
	@echo ">> the lab: real Slurm 26.05 and 24.11 (needs root)"
	$(LAB) up
	$(LAB) status
	@echo ">> the slurmrestd modules on Slurm 26.05 (tests/demo/slurm_modules.yml)"
	eval "$$($(LAB) env --release 26.05)"; \
	  SLURMRESTD_URL=$$SLURM_LAB_2605_URL SLURM_JWT_KEY_PATH=$$SLURM_LAB_2605_JWT_KEY \
	  ANSIBLE_COLLECTIONS_PATH=$(BUILD)/installed ansible-playbook -i localhost, -c local tests/demo/slurm_modules.yml
	@echo ">> the Slurm nodes as an inventory (hpcops.slinky.slurm)"
	eval "$$($(LAB) env --release 26.05)"; \
	  SLURMRESTD_URL=$$SLURM_LAB_2605_URL SLURM_JWT_KEY_PATH=$$SLURM_LAB_2605_JWT_KEY \
	  ANSIBLE_COLLECTIONS_PATH=$(BUILD)/installed ansible-inventory -i tests/demo/lab.slurm.yml --graph
	@echo ">> the Kubernetes control plane with kwok nodes (first run builds it from Go modules)"
	$(K8S_LAB) up --deployed-release-only
	eval "$$($(K8S_LAB) env)"; kubectl get nodes -L hpcops.io/pool,nvidia.com/gpu.product
	@echo ">> site.yml on the lab: Slinky CRDs, the real operator, the Slurm cluster from the pools"
	ANSIBLE_COLLECTIONS_PATH=$(BUILD)/installed ansible-playbook -i inventories/lab playbooks/site.yml
	eval "$$($(K8S_LAB) env)"; kubectl get nodesets,controllers,restapis -n slurm; \
	  kubectl get configmap -n slurm slurm-config -o jsonpath='{.data.slurm\.conf}' | sed -n '/EXTRA CONFIG/,$$p'
	@echo ">> lend int01 to Slurm, show the pool, give it back (the handover protocol)"
	ANSIBLE_COLLECTIONS_PATH=$(BUILD)/installed ansible-playbook -i inventories/lab playbooks/lend.yml \
	  -e '{"handover_nodes": ["int01"]}'
	ANSIBLE_COLLECTIONS_PATH=$(BUILD)/installed ansible-playbook -i inventories/lab playbooks/status.yml
	ANSIBLE_COLLECTIONS_PATH=$(BUILD)/installed ansible-playbook -i inventories/lab playbooks/reclaim.yml \
	  -e '{"handover_nodes": ["int01"]}'
	eval "$$($(K8S_LAB) env)"; kubectl describe node int01 | sed -n '/^Events:/,$$p'
	@echo ">> the lab stays up: 'make lab-status', 'make lab-down'"

# The local lab (see tests/lab/README.md): real Slurm 26.05 and 24.11, and a real
# Kubernetes control plane with kwok nodes built from Go modules. Needs root.
LAB := $(PYTHON) tests/lab/slurm_lab.py
K8S_LAB := $(PYTHON) tests/lab/k8s_lab.py

lab-up: deps
	$(LAB) up
	$(K8S_LAB) up

lab-down:
	$(K8S_LAB) down
	$(LAB) down

lab-status:
	$(LAB) status; slurm=$$?; $(K8S_LAB) status; k8s=$$?; exit $$((slurm > k8s ? slurm : k8s))

# Pinned builds of kube-apiserver, controller-manager, scheduler, kubectl, kwok, helm and the
# Slinky operator, cached outside the repo (cold: about 25 minutes on 2 cores).
k8s-binaries: deps
	$(PYTHON) tests/lab/k8s_binaries.py build

# Every image of molecule's kind scenario, built here (no registry): starts dockerd if it is
# not running (tests/lab/docker_engine.py), then builds what is missing (cold: about 10 minutes).
kind-images: deps
	$(PYTHON) tests/lab/docker_engine.py up
	$(PYTHON) tests/lab/kind_images.py build

kind-down:
	$(PYTHON) tests/lab/docker_engine.py down

# Fixtures must come from a freshly started lab, so job ids are the same every time.
record-slurm-fixtures: deps
	$(LAB) down
	$(LAB) up
	$(PYTHON) tests/lab/record_slurmrestd.py

# Figures, not tests: each script prints a table (see benchmarks/).
benchmarks: setup
	$(BIN)/python benchmarks/slurm_info_scale.py
	$(BIN)/python benchmarks/accounting_apply.py
	$(BIN)/python benchmarks/lending_report.py
	$(BIN)/python benchmarks/handover_plan_scale.py
	$(BIN)/python benchmarks/handover_demand_read.py
	$(BIN)/python benchmarks/handover_trace.py
	@echo "benchmarks/handover_reclaim.py needs the lab (make lab-up) and runs in it"
	$(BIN)/python benchmarks/handover_reclaim.py
	$(BIN)/python benchmarks/handover_events.py
	$(BIN)/python benchmarks/handover_events.py --jobs
	@echo "benchmarks/handover_kind.py needs the handover cluster: molecule converge -s handover (README)"
	@echo "benchmarks/autoscale_kind.py needs the autoscale cluster: molecule converge -s autoscale (README)"

clean:
	rm -rf $(BUILD) .pytest_cache .mypy_cache .ruff_cache tests/output
