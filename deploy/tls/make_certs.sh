#!/usr/bin/env bash
# Makes a private CA and the certificates a TLS cluster needs, with the openssl command:
#   ca.pem, ca.key          the CA (give ca.pem to workers: ClientOptions::tls_ca_file)
#   server.pem, server.key  one certificate for every shard, naming the given addresses
#                           (ps-server --tls_cert_file / --tls_key_file)
#   client.pem, client.key  a worker certificate, for shards that require one (--tls_ca_file)
#
#   deploy/tls/make_certs.sh OUT_DIR [ADDRESS...]    # addresses: IPs or DNS names, default 127.0.0.1
# Keys are EC P-256 and unencrypted; certificates are valid for --days (default 365).
set -euo pipefail

days=365
if [ "${1:-}" = "--days" ]; then
  days=$2
  shift 2
fi
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  sed -n '2,9p' "$0"
  exit 2
fi
out=$1
shift
addresses=("$@")
if [ ${#addresses[@]} -eq 0 ]; then
  addresses=(127.0.0.1)
fi

names=()
for address in "${addresses[@]}"; do
  if [[ "$address" =~ ^[0-9.]+$ || "$address" == *:* ]]; then
    names+=("IP:$address")
  else
    names+=("DNS:$address")
  fi
done
san=$(IFS=,; echo "${names[*]}")

mkdir -p "$out"
cd "$out"
umask 077
key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
printf 'subjectAltName=%s\n' "$san" > server.ext
openssl req -x509 "${key[@]}" -keyout ca.key -out ca.pem -days "$days" -subj /CN=hetps-ca \
  2>/dev/null
openssl req "${key[@]}" -keyout server.key -out server.csr -subj "/CN=${addresses[0]}" 2>/dev/null
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -extfile server.ext \
  -out server.pem -days "$days" 2>/dev/null
openssl req "${key[@]}" -keyout client.key -out client.csr -subj /CN=hetps-worker 2>/dev/null
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem \
  -days "$days" 2>/dev/null
rm -f server.csr client.csr server.ext ca.srl
chmod 644 ca.pem server.pem client.pem
echo "certificates for ${san} in $(pwd)"
