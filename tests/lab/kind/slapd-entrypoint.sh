#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Debian's slapd as a site's directory, for hpcops.slinky's kind scenarios: one MDB database
# for LDAP_SUFFIX, loaded on first start from the LDIF files in /ldif (a ConfigMap), the
# admin's password from LDAP_ROOT_PASSWORD (a Secret). Users read everything once bound;
# anonymous clients only bind.
set -euo pipefail
: "${LDAP_SUFFIX:?}" "${LDAP_ROOT_PASSWORD:?}"
mkdir -p /var/lib/ldap /run/slapd
conf=/run/slapd/slapd.conf
cat >"$conf" <<CONF
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/nis.schema
include /etc/ldap/schema/inetorgperson.schema
pidfile /run/slapd/slapd.pid
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
suffix "$LDAP_SUFFIX"
rootdn "cn=admin,$LDAP_SUFFIX"
rootpw $(slappasswd -s "$LDAP_ROOT_PASSWORD")
directory /var/lib/ldap
access to attrs=userPassword by anonymous auth by self read by * none
access to * by users read by * none
CONF
if [[ ! -e /var/lib/ldap/data.mdb ]]; then
  for ldif in /ldif/*.ldif; do
    [[ -e $ldif ]] && slapadd -f "$conf" -l "$ldif"
  done
fi
chown -R openldap:openldap /var/lib/ldap /run/slapd
exec slapd -d stats -h "ldap:///" -f "$conf" -u openldap -g openldap
