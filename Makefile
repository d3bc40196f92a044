# `make run` and `make test` do all of their own setup: a virtualenv in .venv with the pinned
# requirements, the npm packages of the local stack (dynalite, s3rver) in node_modules, and
# Debian's Chromium for the browser agents.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
VENV_PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# Both cores by default (CI has two); `make test PYTEST_ARGS=` runs one process.
PYTEST_ARGS ?= -n 2 --dist loadgroup
# Byte code cached on disk: without it every Python the tests start (the local stacks, the CLI)
# compiles boto3, moto and the app again, about 1.7 s of CPU each. The packages never ship it
# (infra/packaging.py compiles its own and leaves __pycache__ out).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-fast screenshots deps chromium lint bench clean deploy destroy deploy-unlock key

run: deps chromium
	$(VENV_PY) -m chalicelib.local

# The deployment proof (tests/deploy) builds .venv-deploy itself, beside the other tests.
test: deps chromium
	$(VENV_PY) -m pytest $(PYTEST_ARGS)

# While working: the domain's unit tests, the services on the fakes and the contract suite on the fakes
# (not its runs over moto), on both cores. `make test` stays the whole suite.
test-fast: deps
	$(VENV_PY) -m pytest -n 2 -p no:cacheprovider -m "not moto" tests/unit tests/services tests/contract $(PYTEST_ARGS)

# The web app's pictures in docs/screenshots/, taken by its end-to-end tests in Chromium.
screenshots: deps chromium
	WEB_SCREENSHOTS=docs/screenshots $(VENV_PY) -m pytest -p no:cacheprovider -q tests/e2e -k web_app

deps: $(PY_STAMP) $(NODE_STAMP)

# uv installs the pinned requirements in about 20 s where pip takes 3 minutes; pip stays in
# the virtualenv because Chalice packages with it (and requires pip<26.3).
UV_VERSION := 0.13.9
$(PY_STAMP): requirements.txt requirements-dev.txt requirements-layer.txt requirements-browser.txt
	test -x $(VENV_PY) || $(PYTHON) -m venv $(VENV)
	$(VENV_PY) -m uv --version 2>/dev/null | grep -q " $(UV_VERSION)" || $(VENV_PY) -m pip install --quiet "uv==$(UV_VERSION)"
	$(VENV_PY) -m uv pip install --quiet --python $(VENV_PY) "pip<26.3" -r requirements-dev.txt
	touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Browser agents drive Debian's Chromium with Playwright (settings.chromium_path, RECON_CHROMIUM_PATH;
# the browser worker's image has it at the same path). Installed when missing: by apt-get as root, or
# through sudo when it asks no password; otherwise make stops and says what to install.
CHROMIUM := $(or $(RECON_CHROMIUM_PATH),/usr/bin/chromium)
APT_INSTALL_CHROMIUM := apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation

chromium:
	@test -x "$(CHROMIUM)" || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's chromium for the browser agents"; $(APT_INSTALL_CHROMIUM); \
	  elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	    echo "installing Debian's chromium for the browser agents (sudo)"; sudo -n sh -c '$(APT_INSTALL_CHROMIUM)'; \
	  fi; \
	  test -x "$(CHROMIUM)" || { \
	    echo "browser agents need Chromium at $(CHROMIUM): install Debian's chromium package (sudo apt-get install chromium)," \
	      "or point RECON_CHROMIUM_PATH at a Chromium or Chrome executable" >&2; exit 1; }; }

# AWS (credentials of the target account in the environment). Python 3.12 is needed: it is
# the Lambda runtime's, and Chalice packages for the interpreter it runs under.
DEPLOY_PY := .venv-deploy/bin/python
DEPLOY_STAMP := .venv-deploy/.installed

$(DEPLOY_STAMP): requirements.txt requirements-deploy.txt | $(PY_STAMP)
	$(VENV_PY) -c "from infra.packaging import ensure_deploy_venv; ensure_deploy_venv()"

# The stage's parameters (README, "Deploy to AWS"): MAIL_FROM (required on a stage's first deploy), MODEL_ID,
# ALARM_EMAIL (`ALARM_EMAIL=` removes the subscription), LOG_RETENTION_DAYS, DYNAMODB_CLIENT (auto, wire or
# botocore: how the functions send the table's requests, docs/runbook.md), and sign-in's (docs/sign-in.md):
# SIGN_IN_CALLBACK_URLS, SIGN_IN_LOGOUT_URLS, SIGN_IN_DOMAIN, SAML_METADATA_URL, OIDC_ISSUER, OIDC_CLIENT_ID,
# OIDC_CLIENT_SECRET (a Secrets Manager secret's name), and WEB_APP_ORIGIN (the web app's custom domain, whose
# pages may then upload to the data bucket in place of the API's; `WEB_APP_ORIGIN=` goes back to the API's).
# One left out keeps the value of the stage's last deploy, so only those given on the command line (or in the
# environment) are passed.
deploy_option = $(if $(filter undefined,$(origin $(1))),,--$(2) '$($(1))')

deploy: deps $(DEPLOY_STAMP)
	@test -n "$(STAGE)" || { echo "usage: make deploy STAGE=prod [MAIL_FROM=... MODEL_ID=... ALARM_EMAIL=... LOG_RETENTION_DAYS=... DYNAMODB_CLIENT=... SIGN_IN_DOMAIN=... (docs/sign-in.md)]"; exit 2; }
	PYTHONPATH=. $(DEPLOY_PY) -m infra.deploy deploy --stage $(STAGE) $(call deploy_option,MAIL_FROM,mail-from) \
	  $(call deploy_option,MODEL_ID,model-id) $(call deploy_option,ALARM_EMAIL,alarm-email) \
	  $(call deploy_option,LOG_RETENTION_DAYS,log-retention-days) $(call deploy_option,DYNAMODB_CLIENT,dynamodb-client) \
	  $(call deploy_option,SIGN_IN_CALLBACK_URLS,sign-in-callback-urls) \
	  $(call deploy_option,SIGN_IN_LOGOUT_URLS,sign-in-logout-urls) $(call deploy_option,SIGN_IN_DOMAIN,sign-in-domain) \
	  $(call deploy_option,SAML_METADATA_URL,saml-metadata-url) $(call deploy_option,OIDC_ISSUER,oidc-issuer) \
	  $(call deploy_option,OIDC_CLIENT_ID,oidc-client-id) $(call deploy_option,OIDC_CLIENT_SECRET,oidc-client-secret) \
	  $(call deploy_option,WEB_APP_ORIGIN,web-app-origin)

destroy: deps $(DEPLOY_STAMP)
	@test -n "$(STAGE)" || { echo "usage: make destroy STAGE=prod [PURGE=1]"; exit 2; }
	PYTHONPATH=. $(DEPLOY_PY) -m infra.deploy destroy --stage $(STAGE) $(if $(PURGE),--purge-data,)

# A deploy or destroy holds its stage's lock (in the artifacts bucket) while it runs, and releases it however it
# ends; one that was killed leaves it, and the next one says who held it and since when. This breaks it.
deploy-unlock: deps $(DEPLOY_STAMP)
	@test -n "$(STAGE)" || { echo "usage: make deploy-unlock STAGE=prod"; exit 2; }
	PYTHONPATH=. $(DEPLOY_PY) -m infra.deploy unlock --stage $(STAGE)

key: deps $(DEPLOY_STAMP)
	@test -n "$(STAGE)" -a -n "$(ENVIRONMENT)" || { echo "usage: make key STAGE=prod ENVIRONMENT=acme"; exit 2; }
	PYTHONPATH=. $(DEPLOY_PY) -m infra.deploy key --stage $(STAGE) --environment $(ENVIRONMENT)

# Style and errors (ruff), then types (mypy: strict on domain/ and services/, see pyproject.toml).
lint: deps
	$(VENV)/bin/ruff check app.py chalicelib infra tests bench
	$(VENV)/bin/mypy

bench: deps
	$(VENV_PY) bench/local_scale.py

clean:
	rm -rf $(VENV) .venv-deploy build node_modules .pytest_cache .hypothesis
