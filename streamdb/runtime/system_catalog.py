"""Postgres system catalogs (pg_catalog.*, information_schema.*) emulated as Arrow tables.

Tools such as psql, SQLAlchemy, JDBC drivers and BI clients discover relations by querying
pg_catalog. We build those tables on demand from a CatalogSnapshot and a SessionInfo; the
ad hoc query engine registers them on DuckDB under `registered_name(key)` and runs the
client's query against them (function emulation lives in streamdb/planner/pg_functions.py).

Decisions (see docs/pg-compat.md):
* Streams appear in pg_class with relkind 'r' (ordinary table) so psql `\\dt` lists them and
  `\\d name` describes them as tables; views are 'v', materialized views 'm'.
* A primary key of a table (RelationDef.primary_key) appears as a unique btree index
  (pg_class relkind 'i', pg_index) named `<rel>_pkey` plus a pg_constraint row (contype 'p').
  A stream's KEY column is a partitioning key, not a constraint, so it gets none.
* OIDs: user relations 16384 + id (catalog.py); their pkey index INDEX_OID_BASE + id and
  constraint CONSTRAINT_OID_BASE + id. System relations get their real Postgres OIDs where
  well known, else one from 12000.. (pg_catalog) or 13001.. (information_schema).
* Column values missing from a builder's row default to false (boolean), 0 (integers/oids)
  or NULL (everything else), which matches what Postgres shows for unused features.
* Array-typed columns (text[], int2vector, oidvector, aclitem[]) are Arrow lists; their
  SqlType is an ArraySqlType (a SqlType subclass named "<elem>[]"; .arrow() gives a list).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from streamdb import types as T
from streamdb.catalog import (
    BOOTSTRAP_ROLE,
    PRIVILEGE_LETTERS,
    PUBLIC_GRANTEE,
    PUBLIC_SCHEMA,
    PUBLIC_SCHEMA_OID,
    CatalogSnapshot,
    RelationDef,
    RoleDef,
)
from streamdb.planner.context import SERVER_VERSION, SERVER_VERSION_NUM, SessionInfo
from streamdb.planner.names import QUOTED_KEYWORDS
from streamdb.types import SqlType

PG_CATALOG_OID = 11
PLPYTHON_LANGUAGE_OID = 13  # pg_language has no row of ours: a fixed number
SQL_LANGUAGE_OID = 14  # as in PostgreSQL
INFORMATION_SCHEMA_OID = 13000
NAMESPACES: tuple[tuple[int, str], ...] = (
    (PG_CATALOG_OID, "pg_catalog"), (PUBLIC_SCHEMA_OID, PUBLIC_SCHEMA),
    (INFORMATION_SCHEMA_OID, "information_schema"),
)
SUPERUSER_OID = 10
DATABASE_OID = 16300  # the one user database; template1 is 1
INDEX_OID_BASE = 1_000_000
CONSTRAINT_OID_BASE = 2_000_000
HEAP_AM_OID = 2
BTREE_AM_OID = 403
HASH_AM_OID = 405
DEFAULT_COLLATION_OID = 100
C_COLLATION_OID = 950
UTF8_ENCODING = 6

# ---------------------------------------------------------------------------------------------
# Types

_TYPNAME: dict[str, str] = {
    "boolean": "bool", "bytea": "bytea", "bigint": "int8", "smallint": "int2", "integer": "int4",
    "text": "text", "oid": "oid", "json": "json", "real": "float4", "double precision": "float8",
    "character varying": "varchar", "date": "date", "time without time zone": "time",
    "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamptz",
    "interval": "interval", "numeric": "numeric", "uuid": "uuid", "jsonb": "jsonb", "name": "name",
    "\"char\"": "char",
}
_BYVAL = {"boolean", "bigint", "smallint", "integer", "oid", "real", "double precision", "date",
          "time without time zone", "timestamp without time zone", "timestamp with time zone",
          "\"char\""}
_COLLATABLE = {"text", "character varying", "name", "\"char\""}


def typname(t: SqlType) -> str:
    """pg_type.typname of a type (int4, varchar, timestamptz, ...); arrays are `_elem`."""
    if t.name.endswith("[]"):
        return "_" + typname(_ELEM[t.name])
    return _TYPNAME.get(t.name, t.name)


def typcollation(t: SqlType) -> int:
    if t.name == "name":
        return C_COLLATION_OID
    return DEFAULT_COLLATION_OID if t.name in _COLLATABLE else 0


ArraySqlType = T.ArraySqlType


# Array types: named "<elem>[]" with oid = elem.array_oid, category 'A'.
ARRAY_TYPES: dict[str, SqlType] = {a.name: a for a in T.ARRAY_TYPES.values()}
_ELEM: dict[str, SqlType] = {a.name: a.element for a in T.ARRAY_TYPES.values() if a.element is not None}
TYPES_BY_OID: dict[int, SqlType] = {t.oid: t for t in T.ALL_TYPES} | {
    a.oid: a for a in ARRAY_TYPES.values()}


def element_type(t: SqlType) -> SqlType | None:
    return _ELEM.get(t.name)


def arrow_type(t: SqlType) -> pa.DataType:
    """Arrow type of a (possibly array) SqlType; same as t.arrow()."""
    return t.arrow()


def format_type(oid: int | None, typmod: int | None = -1) -> str | None:
    """Python twin of pg_catalog.format_type (the DuckDB macro is generated from this table)."""
    if oid is None:
        return None
    t = TYPES_BY_OID.get(oid)
    if t is None:
        return "???"
    elem = _ELEM.get(t.name)
    if elem is not None:
        return (format_type(elem.oid, typmod) or "") + "[]"
    if typmod is not None and typmod >= 4:
        if t.oid == T.VARCHAR.oid:
            return f"character varying({typmod - 4})"
        if t.oid == T.NUMERIC.oid:
            return f"numeric({(typmod - 4) >> 16},{(typmod - 4) & 0xFFFF})"
    return t.name


# ---------------------------------------------------------------------------------------------
# Column specs of every system table.

_SPEC_TYPES: dict[str, SqlType] = {
    "oid": T.OID, "name": T.NAME, "text": T.TEXT, "bool": T.BOOLEAN, "int2": T.SMALLINT,
    "int4": T.INTEGER, "int8": T.BIGINT, "float4": T.REAL, "float8": T.DOUBLE, "char": T.CHAR,
    "varchar": T.VARCHAR, "timestamptz": T.TIMESTAMPTZ,
    # pg types we store in a simpler form
    "regproc": T.NAME, "xid": T.BIGINT, "node": T.TEXT, "inet": T.TEXT, "acl": T.TEXT,
    "oid[]": ARRAY_TYPES["oid[]"], "text[]": ARRAY_TYPES["text[]"],
    "int2[]": ARRAY_TYPES["smallint[]"], "char[]": ARRAY_TYPES["\"char\"[]"],
    "acl[]": ARRAY_TYPES["text[]"], "name[]": ARRAY_TYPES["name[]"],
    "float4[]": ARRAY_TYPES["real[]"],
}


def _cols(spec: str) -> tuple[tuple[str, SqlType], ...]:
    out = []
    for item in spec.split():
        n, _, t = item.partition(":")
        out.append((n, _SPEC_TYPES[t]))
    return tuple(out)


_I = "varchar"  # information_schema's sql_identifier / character_data are varchar-like
_SPECS: dict[str, str] = {
    "pg_catalog.pg_namespace": "oid:oid nspname:name nspowner:oid nspacl:acl[]",
    "pg_catalog.pg_class": (
        "oid:oid relname:name relnamespace:oid reltype:oid reloftype:oid relowner:oid relam:oid "
        "relfilenode:oid reltablespace:oid relpages:int4 reltuples:float4 relallvisible:int4 "
        "reltoastrelid:oid relhasindex:bool relisshared:bool relpersistence:char relkind:char "
        "relnatts:int2 relchecks:int2 relhasrules:bool relhastriggers:bool relhassubclass:bool "
        "relrowsecurity:bool relforcerowsecurity:bool relispopulated:bool relreplident:char "
        "relispartition:bool relrewrite:oid relfrozenxid:xid relminmxid:xid relacl:acl[] "
        "reloptions:text[] relpartbound:node"),
    "pg_catalog.pg_attribute": (
        "attrelid:oid attname:name atttypid:oid attstattarget:int4 attlen:int2 attnum:int2 "
        "attndims:int4 attcacheoff:int4 atttypmod:int4 attbyval:bool attalign:char "
        "attstorage:char attcompression:char attnotnull:bool atthasdef:bool atthasmissing:bool "
        "attidentity:char attgenerated:char attisdropped:bool attislocal:bool attinhcount:int4 "
        "attcollation:oid attacl:acl[] attoptions:text[] attfdwoptions:text[] attmissingval:text"),
    "pg_catalog.pg_type": (
        "oid:oid typname:name typnamespace:oid typowner:oid typlen:int2 typbyval:bool "
        "typtype:char typcategory:char typispreferred:bool typisdefined:bool typdelim:char "
        "typrelid:oid typsubscript:regproc typelem:oid typarray:oid typinput:regproc "
        "typoutput:regproc typreceive:regproc typsend:regproc typmodin:regproc "
        "typmodout:regproc typanalyze:regproc typalign:char typstorage:char typnotnull:bool "
        "typbasetype:oid typtypmod:int4 typndims:int4 typcollation:oid typdefaultbin:node "
        "typdefault:text typacl:acl[]"),
    "pg_catalog.pg_index": (
        "indexrelid:oid indrelid:oid indnatts:int2 indnkeyatts:int2 indisunique:bool "
        "indnullsnotdistinct:bool indisprimary:bool indisexclusion:bool indimmediate:bool "
        "indisclustered:bool indisvalid:bool indcheckxmin:bool indisready:bool indislive:bool "
        "indisreplident:bool indkey:int2[] indcollation:oid[] indclass:oid[] indoption:int2[] "
        "indexprs:node indpred:node"),
    "pg_catalog.pg_constraint": (
        "oid:oid conname:name connamespace:oid contype:char condeferrable:bool "
        "condeferred:bool convalidated:bool conrelid:oid contypid:oid conindid:oid "
        "conparentid:oid confrelid:oid confupdtype:char confdeltype:char confmatchtype:char "
        "conislocal:bool coninhcount:int4 connoinherit:bool conkey:int2[] confkey:int2[] "
        "conpfeqop:oid[] conppeqop:oid[] conffeqop:oid[] confdelsetcols:int2[] "
        "conexclop:oid[] conbin:node"),
    "pg_catalog.pg_attrdef": "oid:oid adrelid:oid adnum:int2 adbin:node",
    "pg_catalog.pg_description": "objoid:oid classoid:oid objsubid:int4 description:text",
    "pg_catalog.pg_shdescription": "objoid:oid classoid:oid description:text",
    "pg_catalog.pg_database": (
        "oid:oid datname:name datdba:oid encoding:int4 datlocprovider:char datistemplate:bool "
        "datallowconn:bool datconnlimit:int4 datfrozenxid:xid datminmxid:xid dattablespace:oid "
        "datcollate:text datctype:text daticulocale:text datcollversion:text datacl:acl[]"),
    "pg_catalog.pg_roles": (
        "rolname:name rolsuper:bool rolinherit:bool rolcreaterole:bool rolcreatedb:bool "
        "rolcanlogin:bool rolreplication:bool rolconnlimit:int4 rolpassword:text "
        "rolvaliduntil:timestamptz rolbypassrls:bool rolconfig:text[] oid:oid"),
    "pg_catalog.pg_authid": (
        "oid:oid rolname:name rolsuper:bool rolinherit:bool rolcreaterole:bool "
        "rolcreatedb:bool rolcanlogin:bool rolreplication:bool rolbypassrls:bool "
        "rolconnlimit:int4 rolpassword:text rolvaliduntil:timestamptz"),
    "pg_catalog.pg_user": (
        "usename:name usesysid:oid usecreatedb:bool usesuper:bool userepl:bool "
        "usebypassrls:bool passwd:text valuntil:timestamptz useconfig:text[]"),
    "pg_catalog.pg_auth_members": (
        "oid:oid roleid:oid member:oid grantor:oid admin_option:bool"),
    "pg_catalog.pg_settings": (
        "name:text setting:text unit:text category:text short_desc:text extra_desc:text "
        "context:text vartype:text source:text min_val:text max_val:text enumvals:text[] "
        "boot_val:text reset_val:text sourcefile:text sourceline:int4 pending_restart:bool"),
    "pg_catalog.pg_proc": (
        "oid:oid proname:name pronamespace:oid proowner:oid prolang:oid procost:float4 "
        "prorows:float4 provariadic:oid prosupport:regproc prokind:char prosecdef:bool "
        "proleakproof:bool proisstrict:bool proretset:bool provolatile:char proparallel:char "
        "pronargs:int2 pronargdefaults:int2 prorettype:oid proargtypes:oid[] "
        "proallargtypes:oid[] proargmodes:char[] proargnames:text[] proargdefaults:node "
        "protrftypes:oid[] prosrc:text probin:text prosqlbody:node proconfig:text[] proacl:acl[]"),
    "pg_catalog.pg_am": "oid:oid amname:name amhandler:regproc amtype:char",
    "pg_catalog.pg_opclass": (
        "oid:oid opcmethod:oid opcname:name opcnamespace:oid opcowner:oid opcfamily:oid "
        "opcintype:oid opcdefault:bool opckeytype:oid"),
    "pg_catalog.pg_views": "schemaname:name viewname:name viewowner:name definition:text",
    "pg_catalog.pg_matviews": (
        "schemaname:name matviewname:name matviewowner:name tablespace:name "
        "hasindexes:bool ispopulated:bool definition:text"),
    "pg_catalog.pg_tables": (
        "schemaname:name tablename:name tableowner:name tablespace:name hasindexes:bool "
        "hasrules:bool hastriggers:bool rowsecurity:bool"),
    "pg_catalog.pg_indexes": (
        "schemaname:name tablename:name indexname:name tablespace:name indexdef:text"),
    "pg_catalog.pg_inherits": (
        "inhrelid:oid inhparent:oid inhseqno:int4 inhdetachpending:bool"),
    "pg_catalog.pg_collation": (
        "oid:oid collname:name collnamespace:oid collowner:oid collprovider:char "
        "collisdeterministic:bool collencoding:int4 collcollate:text collctype:text "
        "colliculocale:text collversion:text"),
    "pg_catalog.pg_extension": (
        "oid:oid extname:name extowner:oid extnamespace:oid extrelocatable:bool "
        "extversion:text extconfig:oid[] extcondition:text[]"),
    "pg_catalog.pg_enum": "oid:oid enumtypid:oid enumsortorder:float4 enumlabel:name",
    "pg_catalog.pg_range": (
        "rngtypid:oid rngsubtype:oid rngmultitypid:oid rngcollation:oid rngsubopc:oid "
        "rngcanonical:regproc rngsubdiff:regproc"),
    "pg_catalog.pg_sequence": (
        "seqrelid:oid seqtypid:oid seqstart:int8 seqincrement:int8 seqmax:int8 seqmin:int8 "
        "seqcache:int8 seqcycle:bool"),
    "pg_catalog.pg_sequences": (
        "schemaname:name sequencename:name sequenceowner:name data_type:text start_value:int8 "
        "min_value:int8 max_value:int8 increment_by:int8 cycle:bool cache_size:int8 "
        "last_value:int8"),
    "pg_catalog.pg_trigger": (
        "oid:oid tgrelid:oid tgparentid:oid tgname:name tgfoid:oid tgtype:int2 "
        "tgenabled:char tgisinternal:bool tgconstrrelid:oid tgconstrindid:oid "
        "tgconstraint:oid tgdeferrable:bool tginitdeferred:bool tgnargs:int2 tgattr:int2[] "
        "tgargs:text tgqual:node tgoldtable:name tgnewtable:name"),
    "pg_catalog.pg_policy": (
        "oid:oid polname:name polrelid:oid polcmd:char polpermissive:bool polroles:oid[] "
        "polqual:node polwithcheck:node"),
    "pg_catalog.pg_rewrite": (
        "oid:oid rulename:name ev_class:oid ev_type:char ev_enabled:char is_instead:bool "
        "ev_qual:node ev_action:node"),
    "pg_catalog.pg_statistic_ext": (
        "oid:oid stxrelid:oid stxname:name stxnamespace:oid stxowner:oid stxstattarget:int4 "
        "stxkeys:int2[] stxkind:char[] stxexprs:node"),
    "pg_catalog.pg_publication": (
        "oid:oid pubname:name pubowner:oid puballtables:bool pubinsert:bool pubupdate:bool "
        "pubdelete:bool pubtruncate:bool pubviaroot:bool"),
    "pg_catalog.pg_publication_rel": (
        "oid:oid prpubid:oid prrelid:oid prqual:node prattrs:int2[]"),
    "pg_catalog.pg_publication_namespace": "oid:oid pnpubid:oid pnnspid:oid",
    "pg_catalog.pg_foreign_table": "ftrelid:oid ftserver:oid ftoptions:text[]",
    "pg_catalog.pg_foreign_server": (
        "oid:oid srvname:name srvowner:oid srvfdw:oid srvtype:text srvversion:text "
        "srvacl:acl[] srvoptions:text[]"),
    "pg_catalog.pg_foreign_data_wrapper": (
        "oid:oid fdwname:name fdwowner:oid fdwhandler:oid fdwvalidator:oid fdwacl:acl[] "
        "fdwoptions:text[]"),
    "pg_catalog.pg_partitioned_table": (
        "partrelid:oid partstrat:char partnatts:int2 partdefid:oid partattrs:int2[] "
        "partclass:oid[] partcollation:oid[] partexprs:node"),
    "pg_catalog.pg_tablespace": "oid:oid spcname:name spcowner:oid spcacl:acl[] spcoptions:text[]",
    "pg_catalog.pg_depend": (
        "classid:oid objid:oid objsubid:int4 refclassid:oid refobjid:oid refobjsubid:int4 "
        "deptype:char"),
    "pg_catalog.pg_event_trigger": (
        "oid:oid evtname:name evtevent:name evtowner:oid evtfoid:oid evtenabled:char "
        "evttags:text[]"),
    # Empty: read by psql's \\dd, \\dc, \\dl, \\dF, \\drds, \\dRs, \\dA*, \\ddp.
    "pg_catalog.pg_opfamily": "oid:oid opfmethod:oid opfname:name opfnamespace:oid opfowner:oid",
    "pg_catalog.pg_conversion": (
        "oid:oid conname:name connamespace:oid conowner:oid conforencoding:int4 "
        "contoencoding:int4 conproc:regproc condefault:bool"),
    "pg_catalog.pg_largeobject_metadata": "oid:oid lomowner:oid lomacl:acl[]",
    "pg_catalog.pg_ts_config": "oid:oid cfgname:name cfgnamespace:oid cfgowner:oid cfgparser:oid",
    "pg_catalog.pg_db_role_setting": "setdatabase:oid setrole:oid setconfig:text[]",
    "pg_catalog.pg_subscription": (
        "oid:oid subdbid:oid subskiplsn:text subname:name subowner:oid subenabled:bool "
        "subbinary:bool substream:bool subtwophasestate:char subdisableonerr:bool "
        "subconninfo:text subslotname:name subsynccommit:text subpublications:text[]"),
    "pg_catalog.pg_amop": (
        "oid:oid amopfamily:oid amoplefttype:oid amoprighttype:oid amopstrategy:int2 "
        "amoppurpose:char amopopr:oid amopmethod:oid amopsortfamily:oid"),
    "pg_catalog.pg_amproc": (
        "oid:oid amprocfamily:oid amproclefttype:oid amprocrighttype:oid amprocnum:int2 "
        "amproc:regproc"),
    "pg_catalog.pg_default_acl": (
        "oid:oid defaclrole:oid defaclnamespace:oid defaclobjtype:char defaclacl:acl[]"),
    "pg_catalog.pg_language": (
        "oid:oid lanname:name lanowner:oid lanispl:bool lanpltrusted:bool "
        "lanplcallfoid:oid laninline:oid lanvalidator:oid lanacl:acl[]"),
    "pg_catalog.pg_cast": (
        "oid:oid castsource:oid casttarget:oid castfunc:oid castcontext:char castmethod:char"),
    "pg_catalog.pg_operator": (
        "oid:oid oprname:name oprnamespace:oid oprowner:oid oprkind:char oprcanmerge:bool "
        "oprcanhash:bool oprleft:oid oprright:oid oprresult:oid oprcom:oid oprnegate:oid "
        "oprcode:regproc oprrest:regproc oprjoin:regproc"),
    "pg_catalog.pg_stat_activity": (
        "datid:oid datname:name pid:int4 leader_pid:int4 usesysid:oid usename:name "
        "application_name:text client_addr:inet client_hostname:text client_port:int4 "
        "backend_start:timestamptz xact_start:timestamptz query_start:timestamptz "
        "state_change:timestamptz wait_event_type:text wait_event:text state:text "
        "backend_xid:xid backend_xmin:xid query_id:int8 query:text backend_type:text"),
    "pg_catalog.pg_locks": (
        "locktype:text database:oid relation:oid pid:int4 mode:text granted:bool "
        "fastpath:bool"),
    "pg_catalog.pg_stat_user_tables": (
        "relid:oid schemaname:name relname:name seq_scan:int8 n_live_tup:int8 "
        "n_dead_tup:int8"),
    "information_schema.schemata": (
        f"catalog_name:{_I} schema_name:{_I} schema_owner:{_I} "
        f"default_character_set_catalog:{_I} default_character_set_schema:{_I} "
        f"default_character_set_name:{_I} sql_path:{_I}"),
    "information_schema.tables": (
        f"table_catalog:{_I} table_schema:{_I} table_name:{_I} table_type:{_I} "
        f"self_referencing_column_name:{_I} reference_generation:{_I} "
        f"user_defined_type_catalog:{_I} user_defined_type_schema:{_I} "
        f"user_defined_type_name:{_I} is_insertable_into:{_I} is_typed:{_I} "
        f"commit_action:{_I}"),
    "information_schema.columns": (
        f"table_catalog:{_I} table_schema:{_I} table_name:{_I} column_name:{_I} "
        f"ordinal_position:int4 column_default:{_I} is_nullable:{_I} data_type:{_I} "
        "character_maximum_length:int4 character_octet_length:int4 numeric_precision:int4 "
        "numeric_precision_radix:int4 numeric_scale:int4 datetime_precision:int4 "
        f"interval_type:{_I} interval_precision:int4 character_set_catalog:{_I} "
        f"character_set_schema:{_I} character_set_name:{_I} collation_catalog:{_I} "
        f"collation_schema:{_I} collation_name:{_I} domain_catalog:{_I} domain_schema:{_I} "
        f"domain_name:{_I} udt_catalog:{_I} udt_schema:{_I} udt_name:{_I} scope_catalog:{_I} "
        f"scope_schema:{_I} scope_name:{_I} maximum_cardinality:int4 dtd_identifier:{_I} "
        f"is_self_referencing:{_I} is_identity:{_I} identity_generation:{_I} "
        f"identity_start:{_I} identity_increment:{_I} identity_maximum:{_I} "
        f"identity_minimum:{_I} identity_cycle:{_I} is_generated:{_I} "
        f"generation_expression:{_I} is_updatable:{_I}"),
    "information_schema.views": (
        f"table_catalog:{_I} table_schema:{_I} table_name:{_I} view_definition:{_I} "
        f"check_option:{_I} is_updatable:{_I} is_insertable_into:{_I} "
        f"is_trigger_updatable:{_I} is_trigger_deletable:{_I} "
        f"is_trigger_insertable_into:{_I}"),
    "information_schema.table_constraints": (
        f"constraint_catalog:{_I} constraint_schema:{_I} constraint_name:{_I} "
        f"table_catalog:{_I} table_schema:{_I} table_name:{_I} constraint_type:{_I} "
        f"is_deferrable:{_I} initially_deferred:{_I} enforced:{_I} nulls_distinct:{_I}"),
    "information_schema.key_column_usage": (
        f"constraint_catalog:{_I} constraint_schema:{_I} constraint_name:{_I} "
        f"table_catalog:{_I} table_schema:{_I} table_name:{_I} column_name:{_I} "
        "ordinal_position:int4 position_in_unique_constraint:int4"),
    "information_schema.referential_constraints": (
        f"constraint_catalog:{_I} constraint_schema:{_I} constraint_name:{_I} "
        f"unique_constraint_catalog:{_I} unique_constraint_schema:{_I} "
        f"unique_constraint_name:{_I} match_option:{_I} update_rule:{_I} delete_rule:{_I}"),
    "information_schema.constraint_column_usage": (
        f"table_catalog:{_I} table_schema:{_I} table_name:{_I} column_name:{_I} "
        f"constraint_catalog:{_I} constraint_schema:{_I} constraint_name:{_I}"),
    "information_schema.routines": (
        f"specific_catalog:{_I} specific_schema:{_I} specific_name:{_I} "
        f"routine_catalog:{_I} routine_schema:{_I} routine_name:{_I} routine_type:{_I} "
        f"data_type:{_I}"),
    "information_schema.sequences": (
        f"sequence_catalog:{_I} sequence_schema:{_I} sequence_name:{_I} data_type:{_I}"),
}

SYSTEM_TABLES: dict[str, tuple[tuple[str, SqlType], ...]] = {
    k: _cols(v) for k, v in _SPECS.items()}

# Real Postgres OIDs for the catalogs tools reference by `'pg_catalog.x'::regclass`.
_KNOWN_OIDS = {
    "pg_type": 1247, "pg_attribute": 1249, "pg_proc": 1255, "pg_class": 1259,
    "pg_authid": 1260, "pg_auth_members": 1261, "pg_database": 1262, "pg_namespace": 2615,
    "pg_index": 2610, "pg_constraint": 2606, "pg_description": 2609, "pg_attrdef": 2604,
    "pg_am": 2601, "pg_inherits": 2611, "pg_opclass": 2616, "pg_rewrite": 2618,
    "pg_trigger": 2620, "pg_cast": 2605, "pg_depend": 2608, "pg_language": 2612,
    "pg_operator": 2617, "pg_collation": 3456, "pg_enum": 3501, "pg_range": 3541,
    "pg_extension": 3079, "pg_sequence": 2224, "pg_policy": 3256, "pg_statistic_ext": 3381,
    "pg_publication": 6104, "pg_publication_rel": 6106, "pg_publication_namespace": 6237,
    "pg_foreign_table": 3118, "pg_foreign_server": 1417, "pg_foreign_data_wrapper": 2328,
    "pg_partitioned_table": 3350, "pg_tablespace": 1213, "pg_shdescription": 2396,
    "pg_event_trigger": 3466,
    "pg_opfamily": 2753, "pg_conversion": 2607, "pg_largeobject_metadata": 2995,
    "pg_ts_config": 3602, "pg_db_role_setting": 2964, "pg_subscription": 6100, "pg_amop": 2602,
    "pg_amproc": 2603, "pg_default_acl": 826,
}
# Views among the system relations (relkind 'v'); the rest are catalogs ('r').
_SYSTEM_VIEWS = {
    "pg_roles", "pg_user", "pg_settings", "pg_views", "pg_matviews", "pg_tables", "pg_indexes",
    "pg_sequences", "pg_stat_activity", "pg_locks", "pg_stat_user_tables",
}


def _assign_system_oids() -> dict[str, int]:
    out: dict[str, int] = {}
    next_pg, next_is = 12000, INFORMATION_SCHEMA_OID + 1
    for key in SYSTEM_TABLES:
        schema, name = key.split(".")
        if schema == "pg_catalog" and name in _KNOWN_OIDS:
            out[key] = _KNOWN_OIDS[name]
        elif schema == "pg_catalog":
            out[key] = next_pg
            next_pg += 1
        else:
            out[key] = next_is
            next_is += 1
    return out


SYSTEM_TABLE_OIDS: dict[str, int] = _assign_system_oids()


def resolve_system_table(schema: str | None, name: str) -> str | None:
    """Canonical key ('pg_catalog.pg_class') if the reference names a system table.

    Unqualified names resolve to pg_catalog only (Postgres searches pg_catalog implicitly
    first); information_schema relations need qualification. Matching is case-insensitive
    (the caller passes identifiers already case-folded unless quoted).
    """
    n = name.lower()
    if schema is None or schema == "":
        key = f"pg_catalog.{n}"
        return key if key in SYSTEM_TABLES else None
    s = schema.lower()
    if s not in ("pg_catalog", "information_schema"):
        return None
    key = f"{s}.{n}"
    return key if key in SYSTEM_TABLES else None


def registered_name(key: str) -> str:
    """DuckDB view name for a system table: 'pg_catalog.pg_class' -> 'sys_pg_catalog__pg_class'."""
    schema, _, name = key.partition(".")
    return f"sys_{schema}__{name}"


def system_table_key_for_registered(name: str) -> str | None:
    m = re.fullmatch(r"sys_(pg_catalog|information_schema)__(\w+)", name)
    if not m:
        return None
    key = f"{m.group(1)}.{m.group(2)}"
    return key if key in SYSTEM_TABLES else None


# ---------------------------------------------------------------------------------------------
# Relation facts shared with pg_functions (regclass, pg_get_*def).

RELKIND: dict[str, str] = {"stream": "r", "table": "r", "view": "v", "materialized_view": "m"}


def relkind(rel: RelationDef) -> str:
    # A derived stream or table (CREATE STREAM ... AS SELECT) lists as what it shows as.
    return RELKIND.get(rel.shown_kind, "r")


def namespace_oid(schema: str) -> int:
    for oid, n in NAMESPACES:
        if n == schema:
            return oid
    return PUBLIC_SCHEMA_OID


def has_pkey(rel: RelationDef) -> bool:
    return bool(rel.primary_key) and rel.kind != "view"


def pkey_name(rel: RelationDef) -> str:
    return f"{rel.name}_pkey"


def index_oid(rel: RelationDef) -> int:
    return INDEX_OID_BASE + rel.id


def constraint_oid(rel: RelationDef) -> int:
    return CONSTRAINT_OID_BASE + rel.id


def quote_ident(name: str) -> str:
    if re.fullmatch(r"[a-z_][a-z0-9_]*", name) and name not in QUOTED_KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def constraint_def(rel: RelationDef) -> str:
    return "PRIMARY KEY (" + ", ".join(quote_ident(c) for c in rel.primary_key) + ")"


def index_def(rel: RelationDef) -> str:
    cols = ", ".join(quote_ident(c) for c in rel.primary_key)
    return (f"CREATE UNIQUE INDEX {quote_ident(pkey_name(rel))} ON "
            f"{quote_ident(rel.schema)}.{quote_ident(rel.name)} USING btree ({cols})")


def user_indexes(cat: CatalogSnapshot) -> list[tuple[RelationDef, RelationDef]]:
    """(index, its relation) of every declared index (CREATE INDEX), by index name."""
    out = []
    for index in cat.objects_of("index"):
        rel = cat.by_id(index.depends_on[0]) if index.depends_on else None
        if rel is not None and not rel.transient:
            out.append((index, rel))
    return out


def has_index(cat: CatalogSnapshot, rel: RelationDef) -> bool:
    return has_pkey(rel) or bool(cat.indexes_of(rel.id))


def index_include(index: RelationDef) -> tuple[str, ...]:
    return tuple(dict(index.extra).get("include") or ())


def user_index_def(index: RelationDef, rel: RelationDef) -> str:
    cols = ", ".join(quote_ident(c.name) for c in index.columns)
    include = index_include(index)
    shown = f" INCLUDE ({', '.join(quote_ident(c) for c in include)})" if include else ""
    return (f"CREATE INDEX {quote_ident(index.name)} ON {quote_ident(rel.schema)}.{quote_ident(rel.name)} "
            f"USING {dict(index.options).get('method', 'btree')} ({cols}){shown}")


_AS_QUERY = re.compile(r"\bAS\s*(\(?\s*(?:SELECT|WITH|VALUES|TABLE)\b.*)$", re.I | re.S)


def view_definition(rel: RelationDef) -> str:
    """The defining query of a view or materialized view, as pg_get_viewdef shows it."""
    m = _AS_QUERY.search(rel.create_sql or "")
    body = (m.group(1) if m else rel.create_sql or "").strip().rstrip(";").strip()
    return " " + body + ";" if body else ""


def regclass_names(catalog: CatalogSnapshot) -> dict[int, str]:
    """oid -> regclass text (as `oid::regclass` prints it) for every relation we expose."""
    out: dict[int, str] = {}
    for key, oid in SYSTEM_TABLE_OIDS.items():
        schema, name = key.split(".")
        out[oid] = name if schema == "pg_catalog" else key
    for rel in catalog.relations.values():
        prefix = "" if rel.schema == PUBLIC_SCHEMA else quote_ident(rel.schema) + "."
        out[rel.oid] = prefix + quote_ident(rel.name)
        if has_pkey(rel):
            out[index_oid(rel)] = prefix + quote_ident(pkey_name(rel))
    return out


def lookup_regclass(catalog: CatalogSnapshot, text: str) -> int | None:
    """OID for a `'name'::regclass` literal, or None if no such relation.

    Accepts `name`, `schema.name` and double-quoted identifiers; unquoted parts fold to
    lower case as in Postgres.
    """
    parts = _split_qualified(text)
    if not parts:
        return None
    name = parts[-1]
    schema = parts[-2] if len(parts) >= 2 else None
    sys_key = resolve_system_table(schema, name) if schema in (None, "pg_catalog",
                                                                "information_schema") else None
    if sys_key is not None and (schema is not None or catalog.get(name) is None):
        return SYSTEM_TABLE_OIDS[sys_key]
    for rel in catalog.relations.values():
        if schema not in (None, rel.schema):
            continue
        if rel.name == name:
            return rel.oid
        if has_pkey(rel) and pkey_name(rel) == name:
            return index_oid(rel)
    return None


def _split_qualified(text: str) -> list[str]:
    parts: list[str] = []
    for m in re.finditer(r'\s*(?:"((?:[^"]|"")*)"|([^."]+))\s*(?:\.|$)', text.strip()):
        if m.group(1) is not None:
            parts.append(m.group(1).replace('""', '"'))
        elif m.group(2) is not None:
            parts.append(m.group(2).strip().lower())
    return parts


# ---------------------------------------------------------------------------------------------
# Builders

Row = dict[str, Any]


def _system_relations() -> Iterable[tuple[str, str, int]]:
    for key, oid in SYSTEM_TABLE_OIDS.items():
        schema, name = key.split(".")
        yield schema, name, oid


def _attr_len(t: SqlType) -> int:
    return t.typlen if t.category != "A" else -1


def _pg_namespace(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"oid": oid, "nspname": n, "nspowner": SUPERUSER_OID} for oid, n in NAMESPACES]


def _pg_class(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows: list[Row] = []
    for schema, name, oid in _system_relations():
        kind = "v" if name in _SYSTEM_VIEWS or schema == "information_schema" else "r"
        rows.append({
            "oid": oid, "relname": name, "relnamespace": namespace_oid(schema),
            "relowner": SUPERUSER_OID, "relam": HEAP_AM_OID if kind == "r" else 0,
            "relfilenode": oid if kind == "r" else 0, "reltuples": -1.0,
            "relpersistence": "p", "relkind": kind, "relispopulated": True,
            "relnatts": len(SYSTEM_TABLES[f"{schema}.{name}"]), "relreplident": "n",
            "relhasrules": kind == "v",
            "relacl": ["=r/" + s.user] if kind == "r" else None,
        })
    for rel in sorted(cat.relations.values(), key=lambda r: r.id):
        kind = relkind(rel)
        rows.append({
            "oid": rel.oid, "relname": rel.name, "relnamespace": namespace_oid(rel.schema),
            "relowner": role_oid(cat, rel.owner), "relam": HEAP_AM_OID if kind != "v" else 0,
            "relacl": relacl(cat, rel),
            "relfilenode": rel.oid if kind != "v" else 0, "reltuples": -1.0,
            "relhasindex": has_index(cat, rel), "relpersistence": "p", "relkind": kind,
            "relnatts": len(rel.columns), "relhasrules": kind == "v", "relispopulated": True,
            "relreplident": "d" if kind != "v" else "n",
        })
        if has_pkey(rel):
            rows.append({
                "oid": index_oid(rel), "relname": pkey_name(rel),
                "relnamespace": namespace_oid(rel.schema), "relowner": role_oid(cat, rel.owner),
                "relam": BTREE_AM_OID, "relfilenode": index_oid(rel), "reltuples": -1.0,
                "relpersistence": "p", "relkind": "i", "relnatts": len(rel.primary_key),
                "relispopulated": True, "relreplident": "n",
            })
    for index, rel in user_indexes(cat):
        method = dict(index.options).get("method", "btree")
        rows.append({
            "oid": index.oid, "relname": index.name, "relnamespace": namespace_oid(rel.schema),
            "relowner": role_oid(cat, rel.owner), "relam": HASH_AM_OID if method == "hash" else BTREE_AM_OID,
            "relfilenode": index.oid, "reltuples": -1.0, "relpersistence": "p", "relkind": "i",
            "relnatts": len(index.columns) + len(index_include(index)), "relispopulated": True,
            "relreplident": "n",
        })
    return rows


def _attribute_row(relid: int, num: int, name: str, t: SqlType, notnull: bool,
                   hasdef: bool = False) -> Row:
    return {
        "attrelid": relid, "attname": name, "atttypid": t.oid, "attstattarget": -1,
        "attlen": _attr_len(t), "attnum": num, "attndims": 1 if t.category == "A" else 0,
        "attcacheoff": -1, "atttypmod": t.typmod, "attbyval": t.name in _BYVAL,
        "attalign": "d" if _attr_len(t) == 8 or _attr_len(t) < 0 else "i",
        "attstorage": "p" if t.typlen > 0 and t.category != "A" else "x", "attcompression": "",
        "attnotnull": notnull, "atthasdef": hasdef, "attidentity": "", "attgenerated": "",
        "attislocal": True, "attcollation": typcollation(t),
    }


def _pg_attribute(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows: list[Row] = []
    for key, oid in SYSTEM_TABLE_OIDS.items():
        for i, (n, t) in enumerate(SYSTEM_TABLES[key], start=1):
            rows.append(_attribute_row(oid, i, n, t, False))
    for rel in sorted(cat.relations.values(), key=lambda r: r.id):
        pk = set(rel.primary_key) if has_pkey(rel) else set()
        for i, c in enumerate(rel.columns, start=1):
            rows.append(_attribute_row(rel.oid, i, c.name, c.type,
                                       (not c.nullable) or c.name in pk,
                                       c.default_sql is not None))
        if pk:
            for i, cname in enumerate(rel.primary_key, start=1):
                col = rel.column(cname)
                if col is not None:
                    rows.append(_attribute_row(index_oid(rel), i, cname, col.type, True))
    return rows


def _pg_attrdef(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows: list[Row] = []
    for rel in sorted(cat.relations.values(), key=lambda r: r.id):
        for i, c in enumerate(rel.columns, start=1):
            if c.default_sql is not None:
                rows.append({"oid": 3_000_000 + rel.id * 1000 + i, "adrelid": rel.oid,
                             "adnum": i, "adbin": c.default_sql})
    return rows


_TYPE_IO: dict[str, str] = {"bool": "bool", "int8": "int8", "int2": "int2", "int4": "int4",
                            "float4": "float4", "float8": "float8", "char": "char"}


def _pg_type(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows: list[Row] = []
    for t in T.ALL_TYPES:
        tn = typname(t)
        io = _TYPE_IO.get(tn, tn)
        base: Row = {
            "oid": t.oid, "typname": tn, "typnamespace": PG_CATALOG_OID,
            "typowner": SUPERUSER_OID, "typlen": t.typlen, "typbyval": t.name in _BYVAL,
            "typtype": "b", "typcategory": t.category,
            "typispreferred": tn in ("text", "float8", "oid", "bool", "timestamptz"),
            "typisdefined": True, "typdelim": ",", "typsubscript": "-", "typelem": 0,
            "typarray": t.array_oid, "typinput": io + "in", "typoutput": io + "out",
            "typreceive": io + "recv", "typsend": io + "send", "typmodin": "-",
            "typmodout": "-", "typanalyze": "-",
            "typalign": "d" if t.typlen in (8, -1) else ("c" if t.typlen == 1 else "i"),
            "typstorage": "x" if t.typlen == -1 else "p", "typtypmod": -1,
            "typcollation": typcollation(t),
        }
        rows.append(base)
        if t.array_oid:
            rows.append(base | {
                "oid": t.array_oid, "typname": "_" + tn, "typlen": -1, "typbyval": False,
                "typcategory": "A", "typispreferred": False, "typelem": t.oid, "typarray": 0,
                "typsubscript": "array_subscript_handler", "typinput": "array_in",
                "typoutput": "array_out", "typreceive": "array_recv", "typsend": "array_send",
                "typanalyze": "array_typanalyze", "typalign": "d", "typstorage": "x",
            })
    return rows


def _pg_index(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows: list[Row] = []
    for rel in sorted(cat.relations.values(), key=lambda r: r.id):
        if not has_pkey(rel):
            continue
        names = rel.column_names()
        keys = [names.index(c) + 1 for c in rel.primary_key if c in names]
        rows.append({
            "indexrelid": index_oid(rel), "indrelid": rel.oid, "indnatts": len(keys),
            "indnkeyatts": len(keys), "indisunique": True, "indisprimary": True,
            "indimmediate": True, "indisvalid": True, "indisready": True, "indislive": True,
            "indkey": keys, "indcollation": [0] * len(keys), "indclass": [0] * len(keys),
            "indoption": [0] * len(keys),
        })
    for index, rel in user_indexes(cat):
        names = rel.column_names()
        keys = [names.index(c.name) + 1 for c in index.columns if c.name in names]
        included = [names.index(c) + 1 for c in index_include(index) if c in names]
        rows.append({
            "indexrelid": index.oid, "indrelid": rel.oid, "indnatts": len(keys) + len(included),
            "indnkeyatts": len(keys), "indisunique": False, "indisprimary": False,
            "indimmediate": True, "indisvalid": True, "indisready": True, "indislive": True,
            "indkey": keys + included, "indcollation": [0] * len(keys), "indclass": [0] * len(keys),
            "indoption": [0] * len(keys),
        })
    return rows


def _pg_constraint(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows: list[Row] = []
    for rel in sorted(cat.relations.values(), key=lambda r: r.id):
        if not has_pkey(rel):
            continue
        names = rel.column_names()
        rows.append({
            "oid": constraint_oid(rel), "conname": pkey_name(rel),
            "connamespace": namespace_oid(rel.schema), "contype": "p", "convalidated": True,
            "conrelid": rel.oid, "conindid": index_oid(rel), "confupdtype": " ",
            "confdeltype": " ", "confmatchtype": " ", "conislocal": True, "connoinherit": True,
            "conkey": [names.index(c) + 1 for c in rel.primary_key if c in names],
        })
    return rows


def _pg_database(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    common: Row = {"datdba": SUPERUSER_OID, "encoding": UTF8_ENCODING, "datlocprovider": "c",
                   "datallowconn": True, "datconnlimit": -1, "datcollate": "C.UTF-8",
                   "datctype": "C.UTF-8"}
    return [
        common | {"oid": DATABASE_OID, "datname": s.database},
        common | {"oid": 1, "datname": "template1", "datistemplate": True,
                  "datacl": ["=c/" + s.user, f"{s.user}=CTc/{s.user}"]},
    ]


def role_oid(cat: CatalogSnapshot, name: str) -> int:
    role = cat.role(name)
    return role.oid if role is not None else SUPERUSER_OID


def relacl(cat: CatalogSnapshot, rel: RelationDef) -> list[str] | None:
    """Postgres's aclitems (`bob=r/owner`) once anything was granted; NULL means the owner's defaults."""
    if not rel.grants:
        return None
    by_role: dict[str, str] = {}
    for role, privilege in rel.grants:
        by_role[role] = by_role.get(role, "") + PRIVILEGE_LETTERS[privilege]
    items = [f"{rel.owner}=arwdDxt/{rel.owner}"]
    items += [f"{'' if role == PUBLIC_GRANTEE else role}={''.join(sorted(letters, key='arwd'.index))}/{rel.owner}"
              for role, letters in sorted(by_role.items())]
    return items


def _role(role: RoleDef) -> Row:
    # Passwords never show: pg_roles masks them as Postgres does, and pg_authid, which holds
    # the verifiers in Postgres, shows NULL here.
    return {"oid": role.oid, "rolname": role.name, "rolsuper": role.superuser, "rolinherit": True,
            "rolcreaterole": role.superuser, "rolcreatedb": role.superuser, "rolcanlogin": role.can_login,
            "rolreplication": role.superuser, "rolbypassrls": role.superuser, "rolconnlimit": -1,
            "rolpassword": "********"}


def _pg_roles(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [_role(r) for r in cat.roles()]


def _pg_authid(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [_role(r) | {"rolpassword": None} for r in cat.roles()]


def _pg_user(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"usename": r.name, "usesysid": r.oid, "usecreatedb": r.superuser,
             "usesuper": r.superuser, "userepl": r.superuser, "usebypassrls": r.superuser, "passwd": "********"}
            for r in cat.roles() if r.can_login]


def default_settings(session: SessionInfo) -> dict[str, str]:
    """Settings every session reports (session.settings override these)."""
    base = {
        "server_version": SERVER_VERSION.split(" ")[0], "server_version_num": SERVER_VERSION_NUM,
        "server_encoding": "UTF8", "client_encoding": "UTF8", "datestyle": "ISO, MDY",
        "timezone": "UTC", "intervalstyle": "postgres", "integer_datetimes": "on",
        "standard_conforming_strings": "on", "search_path": '"$user", public',
        "max_identifier_length": "63", "default_transaction_isolation": "read committed",
        "transaction_isolation": "read committed", "default_transaction_read_only": "off",
        "transaction_read_only": "off", "is_superuser": "on", "lc_collate": "C.UTF-8",
        "lc_ctype": "C.UTF-8", "application_name": session.application_name,
        "extra_float_digits": "1", "bytea_output": "hex", "statement_timeout": "0",
        "lock_timeout": "0", "max_connections": "100", "block_size": "8192",
    }
    return base | dict(session.settings)


def _pg_settings(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"name": k, "setting": v, "category": "Client Connection Defaults",
             "short_desc": "", "context": "user", "vartype": "string", "source": "session",
             "boot_val": v, "reset_val": v, "sourceline": None}
            for k, v in sorted(default_settings(s).items())]


# Functions listed in pg_proc: those we emulate (name, return type oid, arg count).
PROCS: tuple[tuple[str, int, int], ...] = (
    ("version", 25, 0), ("current_database", 19, 0), ("current_schema", 19, 0),
    ("current_schemas", 1003, 1), ("format_type", 25, 2), ("pg_table_is_visible", 16, 1),
    ("pg_get_userbyid", 19, 1), ("obj_description", 25, 2), ("col_description", 25, 2),
    ("pg_get_expr", 25, 2), ("pg_get_constraintdef", 25, 1), ("pg_get_indexdef", 25, 1),
    ("pg_get_viewdef", 25, 1), ("pg_encoding_to_char", 19, 1), ("has_table_privilege", 16, 2),
    ("array_to_string", 25, 2), ("pg_backend_pid", 23, 0), ("txid_current", 20, 0),
    ("pg_postmaster_start_time", 1184, 0), ("now", 1184, 0), ("count", 20, 1),
)


def proc_oid(name: str) -> int | None:
    for i, (n, _, _) in enumerate(PROCS):
        if n == name:
            return 9000 + i
    return None


def _pg_proc(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"oid": 9000 + i, "proname": n, "pronamespace": PG_CATALOG_OID,
             "proowner": SUPERUSER_OID, "prolang": 12, "procost": 1.0, "prorows": 0.0,
             "prosupport": "-", "prokind": "a" if n == "count" else "f", "proisstrict": True,
             "provolatile": "s", "proparallel": "s", "pronargs": nargs, "prorettype": ret,
             "proargtypes": [25] * nargs, "prosrc": n}
            for i, (n, ret, nargs) in enumerate(PROCS)] + [_user_proc(cat, f) for f in cat.objects_of("function")]


def _user_proc(cat: CatalogSnapshot, f: RelationDef) -> Row:
    """A user's function (CREATE FUNCTION ... LANGUAGE python | sql) as pg_proc shows it."""
    extra = dict(f.extra)
    returns = T.type_from_name(str(extra.get("returns", "text")))
    return {"oid": f.oid, "proname": f.name, "pronamespace": namespace_oid(f.schema),
            "proowner": role_oid(cat, f.owner),
            "prolang": SQL_LANGUAGE_OID if extra.get("language") == "sql" else PLPYTHON_LANGUAGE_OID, "procost": 100.0, "prorows": 0.0,
            "prosupport": "-", "prokind": "a" if extra.get("aggregate") else "f",
            "proisstrict": bool(extra.get("strict")), "provolatile": "v",
            "proparallel": "u", "pronargs": len(f.columns), "prorettype": returns.oid if returns else 25,
            "proargtypes": [c.type.oid for c in f.columns], "proargnames": [c.name for c in f.columns],
            "prosrc": str(extra.get("body", ""))}


def _pg_am(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"oid": HEAP_AM_OID, "amname": "heap", "amhandler": "heap_tableam_handler",
             "amtype": "t"},
            {"oid": BTREE_AM_OID, "amname": "btree", "amhandler": "bthandler", "amtype": "i"},
            {"oid": HASH_AM_OID, "amname": "hash", "amhandler": "hashhandler", "amtype": "i"}]


def _pg_collation(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    common: Row = {"collnamespace": PG_CATALOG_OID, "collowner": SUPERUSER_OID,
                   "collisdeterministic": True}
    return [common | {"oid": DEFAULT_COLLATION_OID, "collname": "default",
                      "collprovider": "d", "collencoding": -1},
            common | {"oid": C_COLLATION_OID, "collname": "C", "collprovider": "c",
                      "collencoding": -1, "collcollate": "C", "collctype": "C"},
            common | {"oid": 951, "collname": "POSIX", "collprovider": "c",
                      "collencoding": -1, "collcollate": "POSIX", "collctype": "POSIX"}]


def _pg_tablespace(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"oid": 1663, "spcname": "pg_default", "spcowner": SUPERUSER_OID},
            {"oid": 1664, "spcname": "pg_global", "spcowner": SUPERUSER_OID}]


def _pg_language(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"oid": 12, "lanname": "internal", "lanowner": SUPERUSER_OID},
            {"oid": 13, "lanname": "c", "lanowner": SUPERUSER_OID},
            {"oid": 14, "lanname": "sql", "lanowner": SUPERUSER_OID, "lanpltrusted": True}]


def _user_rels(cat: CatalogSnapshot, *kinds: str) -> list[RelationDef]:
    return sorted((r for r in cat.relations.values() if r.kind in kinds),
                  key=lambda r: (r.schema, r.name))


def _pg_views(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows = [{"schemaname": r.schema, "viewname": r.name, "viewowner": r.owner,
             "definition": view_definition(r)} for r in _user_rels(cat, "view")]
    for schema, name, _ in _system_relations():
        if name in _SYSTEM_VIEWS or schema == "information_schema":
            rows.append({"schemaname": schema, "viewname": name, "viewowner": BOOTSTRAP_ROLE,
                         "definition": ""})
    return rows


def _pg_matviews(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"schemaname": r.schema, "matviewname": r.name, "matviewowner": r.owner,
             "hasindexes": has_index(cat, r), "ispopulated": True, "definition": view_definition(r)}
            for r in _user_rels(cat, "materialized_view")]


def _pg_tables(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows = [{"schemaname": r.schema, "tablename": r.name, "tableowner": r.owner,
             "hasindexes": has_index(cat, r)} for r in _user_rels(cat, "table", "stream")]
    for schema, name, _ in _system_relations():
        if schema == "pg_catalog" and name not in _SYSTEM_VIEWS:
            rows.append({"schemaname": schema, "tablename": name, "tableowner": BOOTSTRAP_ROLE})
    return rows


def _pg_indexes(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"schemaname": r.schema, "tablename": r.name, "indexname": pkey_name(r),
             "indexdef": index_def(r)} for r in _user_rels(cat, "table", "stream",
                                                           "materialized_view") if has_pkey(r)] + [
        {"schemaname": r.schema, "tablename": r.name, "indexname": i.name, "indexdef": user_index_def(i, r)}
        for i, r in user_indexes(cat)]


def _pg_stat_activity(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"datid": DATABASE_OID, "datname": s.database, "pid": s.backend_pid,
             "usesysid": role_oid(cat, s.user), "usename": s.user,
             "application_name": s.application_name, "client_port": -1, "state": "active",
             "backend_type": "client backend", "query": ""}]


def _stat_user_tables(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"relid": r.oid, "schemaname": r.schema, "relname": r.name}
            for r in _user_rels(cat, "table", "stream", "materialized_view")]


# information_schema ---------------------------------------------------------------------------

def _is_schemata(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"catalog_name": s.database, "schema_name": n, "schema_owner": s.user}
            for _, n in NAMESPACES]


def _is_tables(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows: list[Row] = []
    for r in _user_rels(cat, "table", "stream", "view"):
        view = r.kind == "view"
        rows.append({"table_catalog": s.database, "table_schema": r.schema,
                     "table_name": r.name, "table_type": "VIEW" if view else "BASE TABLE",
                     "is_insertable_into": "NO" if view else "YES", "is_typed": "NO"})
    for schema, name, _ in _system_relations():
        view = name in _SYSTEM_VIEWS or schema == "information_schema"
        rows.append({"table_catalog": s.database, "table_schema": schema, "table_name": name,
                     "table_type": "VIEW" if view else "BASE TABLE",
                     "is_insertable_into": "NO", "is_typed": "NO"})
    return rows


_NUMERIC_PREC = {"smallint": (16, 2, 0), "integer": (32, 2, 0), "bigint": (64, 2, 0),
                 "real": (24, 2, None), "double precision": (53, 2, None),
                 "numeric": (None, 10, None)}


def _column_info(s: SessionInfo, schema: str, table: str, pos: int, name: str, t: SqlType,
                 nullable: bool, default: str | None) -> Row:
    elem = element_type(t)
    prec = _NUMERIC_PREC.get(t.name)
    if t.precision_scale is not None:  # numeric(p, s)
        prec = (t.precision_scale[0], 10, t.precision_scale[1])
    return {
        "table_catalog": s.database, "table_schema": schema, "table_name": table,
        "column_name": name, "ordinal_position": pos, "column_default": default,
        "is_nullable": "YES" if nullable else "NO",
        "data_type": "ARRAY" if elem is not None else t.name,
        "character_maximum_length": t.max_length,
        # As Postgres: the longest the value can be in bytes (4 per character in UTF-8).
        "character_octet_length": (4 * t.max_length if t.max_length is not None else 1073741824)
        if t.name in _COLLATABLE else None,
        "numeric_precision": prec[0] if prec else None,
        "numeric_precision_radix": prec[1] if prec else None,
        "numeric_scale": prec[2] if prec else None,
        "datetime_precision": 6 if t.category == "D" and t.name != "date" else (
            0 if t.name == "date" else None),
        "udt_catalog": s.database, "udt_schema": "pg_catalog", "udt_name": typname(t),
        "dtd_identifier": str(pos), "is_self_referencing": "NO", "is_identity": "NO",
        "identity_cycle": "NO", "is_generated": "NEVER", "is_updatable": "YES",
        "collation_catalog": None, "maximum_cardinality": None, "interval_precision": None,
        "position_in_unique_constraint": None,
    }


def _is_columns(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows: list[Row] = []
    for r in _user_rels(cat, "table", "stream", "view"):
        pk = set(r.primary_key) if has_pkey(r) else set()
        for i, c in enumerate(r.columns, start=1):
            rows.append(_column_info(s, r.schema, r.name, i, c.name, c.type,
                                     c.nullable and c.name not in pk, c.default_sql))
    for key in SYSTEM_TABLES:
        schema, name = key.split(".")
        for i, (n, t) in enumerate(SYSTEM_TABLES[key], start=1):
            rows.append(_column_info(s, schema, name, i, n, t, True, None))
    return rows


def _is_views(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"table_catalog": s.database, "table_schema": r.schema, "table_name": r.name,
             "view_definition": view_definition(r), "check_option": "NONE",
             "is_updatable": "NO", "is_insertable_into": "NO", "is_trigger_updatable": "NO",
             "is_trigger_deletable": "NO", "is_trigger_insertable_into": "NO"}
            for r in _user_rels(cat, "view")]


def _is_table_constraints(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{"constraint_catalog": s.database, "constraint_schema": r.schema,
             "constraint_name": pkey_name(r), "table_catalog": s.database,
             "table_schema": r.schema, "table_name": r.name, "constraint_type": "PRIMARY KEY",
             "is_deferrable": "NO", "initially_deferred": "NO", "enforced": "YES",
             "nulls_distinct": None}
            for r in _user_rels(cat, "table", "stream") if has_pkey(r)]


def _is_key_column_usage(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    rows: list[Row] = []
    for r in _user_rels(cat, "table", "stream"):
        if not has_pkey(r):
            continue
        for i, c in enumerate(r.primary_key, start=1):
            rows.append({"constraint_catalog": s.database, "constraint_schema": r.schema,
                         "constraint_name": pkey_name(r), "table_catalog": s.database,
                         "table_schema": r.schema, "table_name": r.name, "column_name": c,
                         "ordinal_position": i})
    return rows


def _is_constraint_column_usage(cat: CatalogSnapshot, s: SessionInfo) -> list[Row]:
    return [{k: v for k, v in row.items() if k in dict(
        SYSTEM_TABLES["information_schema.constraint_column_usage"])}
        for row in _is_key_column_usage(cat, s)]


_Builder = Callable[[CatalogSnapshot, SessionInfo], list[Row]]
_BUILDERS: dict[str, _Builder] = {
    "pg_catalog.pg_namespace": _pg_namespace,
    "pg_catalog.pg_class": _pg_class,
    "pg_catalog.pg_attribute": _pg_attribute,
    "pg_catalog.pg_attrdef": _pg_attrdef,
    "pg_catalog.pg_type": _pg_type,
    "pg_catalog.pg_index": _pg_index,
    "pg_catalog.pg_constraint": _pg_constraint,
    "pg_catalog.pg_database": _pg_database,
    "pg_catalog.pg_roles": _pg_roles,
    "pg_catalog.pg_authid": _pg_authid,
    "pg_catalog.pg_user": _pg_user,
    "pg_catalog.pg_settings": _pg_settings,
    "pg_catalog.pg_proc": _pg_proc,
    "pg_catalog.pg_am": _pg_am,
    "pg_catalog.pg_collation": _pg_collation,
    "pg_catalog.pg_tablespace": _pg_tablespace,
    "pg_catalog.pg_language": _pg_language,
    "pg_catalog.pg_views": _pg_views,
    "pg_catalog.pg_matviews": _pg_matviews,
    "pg_catalog.pg_tables": _pg_tables,
    "pg_catalog.pg_indexes": _pg_indexes,
    "pg_catalog.pg_stat_activity": _pg_stat_activity,
    "pg_catalog.pg_stat_user_tables": _stat_user_tables,
    "information_schema.schemata": _is_schemata,
    "information_schema.tables": _is_tables,
    "information_schema.columns": _is_columns,
    "information_schema.views": _is_views,
    "information_schema.table_constraints": _is_table_constraints,
    "information_schema.key_column_usage": _is_key_column_usage,
    "information_schema.constraint_column_usage": _is_constraint_column_usage,
}


def _default(key: str, t: SqlType) -> Any:
    if key.startswith("information_schema."):
        return None
    if t.name == "boolean":
        return False
    if t.name in ("smallint", "integer", "bigint", "oid"):
        return 0
    return None


def arrow_schema(key: str) -> pa.Schema:
    return pa.schema([pa.field(n, arrow_type(t)) for n, t in SYSTEM_TABLES[key]])


def build_system_table(key: str, catalog: CatalogSnapshot, session: SessionInfo) -> pa.Table:
    """The rows of one system table (see SYSTEM_TABLES for keys) as an Arrow table."""
    cols = SYSTEM_TABLES[key]
    builder = _BUILDERS.get(key)
    rows = builder(catalog, session) if builder is not None else []
    data: dict[str, list[Any]] = {}
    for n, t in cols:
        d = _default(key, t)
        data[n] = [r.get(n, d) for r in rows]
    return pa.table(data, schema=arrow_schema(key))
