#!/usr/bin/env sh
# Create the deployment's secrets once, next to docker-compose.yml (all git-ignored):
#   .env                     POSTGRES_PASSWORD, read by compose for postgres and the gateways
#   secrets/lab-api-key      the API key the one-shot `lab` service sends
#   secrets/api-keys.json    the gateways' key file: SHA-256 hashes only, with their prefixes
# Existing files are kept, so running it again never rotates a secret by surprise.
set -eu
cd "$(dirname "$0")"
mkdir -p secrets
# the gateway image runs as uid 10001 and reads the files compose mounts: keep them readable
umask 022
[ -e .env ] || printf 'POSTGRES_PASSWORD=%s\n' "$(openssl rand -hex 24)" > .env
[ -e secrets/lab-api-key ] || openssl rand -hex 32 > secrets/lab-api-key
if [ ! -e secrets/api-keys.json ]; then
    hash=$(tr -d '\n' < secrets/lab-api-key | sha256sum | cut -d' ' -f1)
    printf '{"keys": [{"name": "lab", "sha256": "%s", "prefixes": ["loadcheck/"]}]}\n' "$hash" \
        > secrets/api-keys.json
fi
echo "secrets ready in $(pwd): .env, secrets/lab-api-key, secrets/api-keys.json" >&2
