-- fencegate 0.1.0 (schema version 2), populated by its own fenced store; `pg_dump --no-owner --no-privileges --inserts -t 'fencegate_*'`, with psql-only meta-command lines removed.
--
-- PostgreSQL database dump
--


-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: fencegate_audit; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fencegate_audit (
    id bigint NOT NULL,
    at timestamp with time zone NOT NULL,
    client character varying(128) NOT NULL,
    method character varying(8) NOT NULL,
    key character varying(512),
    resource character varying(256),
    token bigint,
    mark bigint,
    status integer NOT NULL,
    outcome character varying(64) NOT NULL
);


--
-- Name: fencegate_audit_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.fencegate_audit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: fencegate_audit_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.fencegate_audit_id_seq OWNED BY public.fencegate_audit.id;


--
-- Name: fencegate_fences; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fencegate_fences (
    resource character varying(256) NOT NULL,
    token bigint NOT NULL,
    updated_at timestamp with time zone NOT NULL
);


--
-- Name: fencegate_idempotency; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fencegate_idempotency (
    client character varying(128) NOT NULL,
    idempotency_key character varying(128) NOT NULL,
    request_digest character varying(64) NOT NULL,
    key character varying(512) NOT NULL,
    resource character varying(256) NOT NULL,
    token bigint NOT NULL,
    version bigint,
    size bigint NOT NULL,
    digest character varying(64),
    created boolean NOT NULL,
    at timestamp with time zone NOT NULL
);


--
-- Name: fencegate_objects; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fencegate_objects (
    key character varying(512) NOT NULL,
    data bytea NOT NULL,
    size bigint NOT NULL,
    digest character varying(64) NOT NULL,
    version bigint NOT NULL,
    token bigint NOT NULL,
    resource character varying(256) NOT NULL,
    updated_at timestamp with time zone NOT NULL
);


--
-- Name: fencegate_schema; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fencegate_schema (
    id integer NOT NULL,
    version integer NOT NULL
);


--
-- Name: fencegate_schema_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.fencegate_schema_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: fencegate_schema_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.fencegate_schema_id_seq OWNED BY public.fencegate_schema.id;


--
-- Name: fencegate_audit id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fencegate_audit ALTER COLUMN id SET DEFAULT nextval('public.fencegate_audit_id_seq'::regclass);


--
-- Name: fencegate_schema id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fencegate_schema ALTER COLUMN id SET DEFAULT nextval('public.fencegate_schema_id_seq'::regclass);


--
-- Data for Name: fencegate_audit; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.fencegate_audit VALUES (1, '2026-11-25 06:06:51.3234+00', '-', 'PUT', 'invoices/1', 'invoices', 5, 5, 201, 'accepted');
INSERT INTO public.fencegate_audit VALUES (2, '2026-11-25 06:06:51.327299+00', 'key:billing', 'PUT', 'invoices/2', 'invoices', 6, 6, 201, 'accepted');
INSERT INTO public.fencegate_audit VALUES (3, '2026-11-25 06:06:51.329627+00', '-', 'PUT', 'notes/7', 'notes/7', 3, 3, 201, 'accepted');
INSERT INTO public.fencegate_audit VALUES (4, '2026-11-25 06:06:51.330998+00', '-', 'PUT', 'gone/1', 'gone', 2, 2, 201, 'accepted');
INSERT INTO public.fencegate_audit VALUES (5, '2026-11-25 06:06:51.333686+00', '-', 'DELETE', 'gone/1', 'gone', 2, 2, 200, 'accepted');


--
-- Data for Name: fencegate_fences; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.fencegate_fences VALUES ('invoices', 6, '2026-11-25 06:06:51.3269+00');
INSERT INTO public.fencegate_fences VALUES ('notes/7', 3, '2026-11-25 06:06:51.329203+00');
INSERT INTO public.fencegate_fences VALUES ('gone', 2, '2026-11-25 06:06:51.331926+00');


--
-- Data for Name: fencegate_idempotency; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.fencegate_idempotency VALUES ('key:billing', 'k-1', 'dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd', 'invoices/2', 'invoices', 6, 1, 3, '3fc4ccfe745870e2c0d99f71f30ff0656c8dedd41cc1d7d3d376b0dbe685e2f3', true, '2026-11-25 06:06:51.327563+00');


--
-- Data for Name: fencegate_objects; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.fencegate_objects VALUES ('invoices/1', '\x6f6e65', 3, '7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed', 1, 5, 'invoices', '2026-11-25 06:06:51.320572+00');
INSERT INTO public.fencegate_objects VALUES ('invoices/2', '\x74776f', 3, '3fc4ccfe745870e2c0d99f71f30ff0656c8dedd41cc1d7d3d376b0dbe685e2f3', 1, 6, 'invoices', '2026-11-25 06:06:51.3269+00');
INSERT INTO public.fencegate_objects VALUES ('notes/7', '\x736576656e', 5, '3ba8d02b16fd2a01c1a8ba1a1f036d7ce386ed953696fa57331c2ac48a80b255', 1, 3, 'notes/7', '2026-11-25 06:06:51.329203+00');


--
-- Data for Name: fencegate_schema; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.fencegate_schema VALUES (1, 2);


--
-- Name: fencegate_audit_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.fencegate_audit_id_seq', 5, true);


--
-- Name: fencegate_schema_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.fencegate_schema_id_seq', 1, false);


--
-- Name: fencegate_audit fencegate_audit_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fencegate_audit
    ADD CONSTRAINT fencegate_audit_pkey PRIMARY KEY (id);


--
-- Name: fencegate_fences fencegate_fences_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fencegate_fences
    ADD CONSTRAINT fencegate_fences_pkey PRIMARY KEY (resource);


--
-- Name: fencegate_idempotency fencegate_idempotency_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fencegate_idempotency
    ADD CONSTRAINT fencegate_idempotency_pkey PRIMARY KEY (client, idempotency_key);


--
-- Name: fencegate_objects fencegate_objects_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fencegate_objects
    ADD CONSTRAINT fencegate_objects_pkey PRIMARY KEY (key);


--
-- Name: fencegate_schema fencegate_schema_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fencegate_schema
    ADD CONSTRAINT fencegate_schema_pkey PRIMARY KEY (id);


--
-- PostgreSQL database dump complete
--


