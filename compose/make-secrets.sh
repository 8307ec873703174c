#!/usr/bin/env sh
# Create the deployment's secrets once, next to docker-compose.yml (all git-ignored):
#   .env                     POSTGRES_PASSWORD, read by compose for postgres and the gateways
#   secrets/lab-api-key      the API key the one-shot `lab` service sends
#   secrets/api-keys.json    the gateways' key file: SHA-256 hashes only, with their prefixes
#   secrets/tls/             a CA of the deployment's own and the certificates it signed (openssl):
#     ca.pem                       what every client and server trusts (ca.key, the CA's key, is used only here)
#     postgres.crt/.key            PostgreSQL's server certificate, for the name `postgres`
#     zookeeper-N.pem              ZooKeeper member N's key and certificate in one file (ZooKeeper's PEM key store),
#                                  for the name `zookeeper-N`
#     redis-N.crt/.key             Redis master N's certificate, for the names `redis-N` and `localhost` (its
#                                  health check connects there, showing this certificate as its client one)
#     gateway.crt/.key             the gateways' HTTPS certificate, for `lb` (clients reach the gateways
#                                  through HAProxy's TCP passthrough), `gateway-1`, `gateway-2`,
#                                  `localhost` and 127.0.0.1 (the host's published port)
#     fencegate.crt/.key           the gateways' client certificate; its name is their PostgreSQL role
#                                  (clientcert=verify-full compares them)
#     lab.crt/.key                 the `lab` service's client certificate (Redis, ZooKeeper; the gateway
#                                  too when it requires one: its name is the lab's API key entry)
#     lb.pem                       HAProxy's client certificate and key in one file, for its health checks
# Existing files are kept, so running it again never rotates a secret by surprise; to renew the
# certificates, remove secrets/tls/ and run it again, then restart the services one at a time.
set -eu
cd "$(dirname "$0")"
here=$(pwd)
DAYS=825  # the longest validity clients accept for a server certificate
mkdir -p secrets/tls
# The containers read the mounted files as their own users (the gateway image runs as uid 10001,
# postgres as 999, zookeeper as 1000), so the files are readable (0644) and the directory, on this
# host, is the operator's alone (0700). PostgreSQL copies its key to a 0600 file of its own at start.
chmod 700 secrets
umask 022
[ -e .env ] || printf 'POSTGRES_PASSWORD=%s\n' "$(openssl rand -hex 24)" > .env
[ -e secrets/lab-api-key ] || openssl rand -hex 32 > secrets/lab-api-key
if [ ! -e secrets/api-keys.json ]; then
    hash=$(tr -d '\n' < secrets/lab-api-key | sha256sum | cut -d' ' -f1)
    printf '{"keys": [{"name": "lab", "sha256": "%s", "prefixes": ["loadcheck/"]}]}\n' "$hash" \
        > secrets/api-keys.json
fi

# the S3 store's one identity (profile s3): SeaweedFS's identities file, and the same keys as an AWS
# shared credentials file for the gateways (AWS_SHARED_CREDENTIALS_FILE)
if [ ! -e secrets/s3-identities.json ]; then
    access="FG$(openssl rand -hex 8 | tr a-f A-F)"
    secret=$(openssl rand -hex 24)
    printf '{"identities": [{"name": "fencegate", "credentials": [{"accessKey": "%s", "secretKey": "%s"}], "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}\n' \
        "$access" "$secret" > secrets/s3-identities.json
    printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$access" "$secret" \
        > secrets/s3-credentials
fi

cd secrets/tls
if [ ! -e ca.pem ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$DAYS" \
        -subj "/CN=fencegate deployment CA" -keyout ca.key -out ca.pem \
        -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    chmod 600 ca.key  # never mounted into a container
fi

# issue NAME USAGE [NAMES]: NAME.crt and NAME.key (EC P-256, PKCS#8), signed by the CA; USAGE is the
# extended key usage (serverAuth, clientAuth or both), NAMES its subjectAltName (DNS:a,DNS:b,IP:c)
issue() {
    [ -e "$1.crt" ] && return 0
    ext=$(mktemp)
    printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\n' \
        "$2" > "$ext"
    [ -z "${3:-}" ] || printf 'subjectAltName=%s\n' "$3" >> "$ext"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
        -keyout "$1.key" -out "$1.csr" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" \
        -days "$DAYS" -extfile "$ext" -out "$1.crt" 2>/dev/null
    rm -f "$ext" "$1.csr"
    chmod 644 "$1.key"
}

issue postgres serverAuth DNS:postgres
for n in 1 2 3; do
    issue "zookeeper-$n" serverAuth "DNS:zookeeper-$n"
    [ -e "zookeeper-$n.pem" ] || cat "zookeeper-$n.key" "zookeeper-$n.crt" > "zookeeper-$n.pem"
done
for n in 1 2 3 4 5; do
    issue "redis-$n" serverAuth,clientAuth "DNS:redis-$n,DNS:localhost"
done
issue gateway serverAuth DNS:lb,DNS:gateway-1,DNS:gateway-2,DNS:localhost,IP:127.0.0.1
issue fencegate clientAuth
issue lab clientAuth
issue lb clientAuth
[ -e lb.pem ] || cat lb.crt lb.key > lb.pem
echo "secrets ready in $here: .env, secrets/lab-api-key, secrets/api-keys.json, secrets/s3-*, secrets/tls/" >&2
