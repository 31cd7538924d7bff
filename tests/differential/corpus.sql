-- The differential corpus (tests/test_e2e_differential.py): each query runs in PostgreSQL 15, in
-- StreamDB ad hoc on the embedded engine and on Spark, and as a StreamDB materialized view, over
-- the same tables, before and after the changes below; every answer must print the same text.
--
-- Sections start with "-- setup", "-- changes" and "-- query: <name>". {people}, {orders} and
-- {depts} are the tables' names (unique per run). Statements end with ";" at the end of a line.
-- A "-- known: <engines>: <why>" line names engines whose answer still differs from
-- PostgreSQL's (docs/known-issues.md); the test fails once they agree, so the line goes with the fix.
-- A query's "-- ordered" line says its ORDER BY orders every row: the order is compared too
-- (ad hoc; a view's rows have no order). A query's "-- view: refused <SQLSTATE> <why>" line says a view refuses it (and must, with
-- that SQLSTATE); its ad hoc answers are still compared.

-- setup
CREATE TABLE {people} (id INT PRIMARY KEY, name TEXT, dept TEXT, salary NUMERIC(10, 2), age INT,
    hired DATE, score DOUBLE PRECISION, active BOOLEAN);
CREATE TABLE {orders} (oid INT PRIMARY KEY, pid INT, amount NUMERIC(12, 2), qty BIGINT,
    placed TIMESTAMP, note TEXT);
CREATE TABLE {depts} (dept TEXT PRIMARY KEY, floor INT, budget BIGINT);
INSERT INTO {people} VALUES
    (1, 'Ada', 'eng', 120000.00, 36, '2019-03-01', 9.5, true),
    (2, 'Grace', 'eng', 135000.50, 45, '2015-07-15', 8.25, true),
    (3, 'Linus', 'ops', 98000.00, 29, '2021-01-10', 7.0, false),
    (4, 'Barbara', 'eng', 120000.00, 52, '2010-11-30', NULL, true),
    (5, 'Ken', 'ops', NULL, 61, '2008-05-05', 6.5, true),
    (6, 'Margaret', 'sales', 87000.25, 33, '2020-02-29', 8.0, NULL),
    (7, 'Alan', NULL, 50000.00, NULL, NULL, 5.125, false),
    (8, 'edsger', 'sales', 87000.25, 40, '2018-08-08', 0.1, true),
    (9, 'Ünal', 'eng', 0.01, 22, '2023-12-31', -3.75, true),
    (10, 'Dennis', 'ops', 98000.00, 29, '2021-01-10', 7.0, false);
INSERT INTO {orders} VALUES
    (100, 1, 250.00, 2, '2024-01-01 10:00:00', 'first'),
    (101, 1, 99.99, 1, '2024-01-01 23:59:59', NULL),
    (102, 2, 1000.50, 10, '2024-01-02 08:30:00', 'bulk'),
    (103, 3, 0.00, 0, '2024-01-02 08:30:00', 'free'),
    (104, 3, 12.34, 3, '2024-02-29 12:00:00', 'leap'),
    (105, 5, -20.00, -1, '2024-03-01 00:00:00', 'refund'),
    (106, 6, 500.00, 5, '2024-03-15 18:45:30', NULL),
    (107, 6, 500.00, 5, '2024-03-15 18:45:30', 'dup'),
    (108, 8, 75.50, 7, '2024-04-01 09:00:00', 'Ünicode'),
    (109, 11, 10.00, 1, '2024-04-02 10:00:00', 'nobody'),
    (110, NULL, 5.55, 2, NULL, 'orphan'),
    (111, 2, 333.33, 3, '2024-12-31 23:59:59', 'year end');
INSERT INTO {depts} VALUES ('eng', 3, 1000000), ('ops', 1, 250000), ('sales', 2, 400000),
    ('legal', 4, 90000);

-- changes
UPDATE {people} SET salary = 140000.00, score = 9.75 WHERE id = 2;
UPDATE {people} SET dept = 'ops' WHERE id = 1;
DELETE FROM {people} WHERE id = 3;
INSERT INTO {people} VALUES (11, 'Frances', 'legal', 110000.00, 48, '2012-06-01', 8.5, true),
    (12, 'John', 'eng', 120000.00, 36, '2019-03-01', 9.5, true);
UPDATE {orders} SET amount = amount + 1, note = 'changed' WHERE oid = 100;
DELETE FROM {orders} WHERE oid IN (103, 107);
INSERT INTO {orders} VALUES (112, 12, 42.00, 4, '2024-05-05 05:05:05', 'new'),
    (113, 9, 0.01, 1, '2024-05-06 00:00:00', NULL);
UPDATE {depts} SET budget = 0 WHERE dept = 'legal';

-- query: projection and integer arithmetic
SELECT id, age + 1 AS next_age, age / 7 AS weeks, age % 7 AS rest, -age AS neg, age * age AS sq
FROM {people};

-- query: numeric arithmetic and rounding
-- known: embedded, spark, view: numeric / integer is a double (PostgreSQL: numeric, with a scale that depends on the value)
SELECT id, salary * 2 AS doubled, salary / 3 AS third, round(salary / 12, 2) AS monthly,
    trunc(salary, -3) AS thousands, salary - 0.005 AS less, abs(salary - 100000) AS dist
FROM {people};

-- query: double precision
SELECT id, score * 2 AS doubled, score / 3 AS third, score + 0.2 AS plus, round(score) AS r,
    ceil(score) AS c, floor(score) AS f, score::int AS i
FROM {people};

-- query: numeric and double mixed
SELECT id, salary * score AS mixed, salary::float8 / 7 AS f, (salary / 7)::numeric(12, 4) AS n
FROM {people};

-- query: casts to text and back
SELECT id, salary::text AS s, age::text || ' years' AS a, score::text AS f, hired::text AS d,
    active::text AS b, '42'::int + id AS n
FROM {people};

-- query: string functions
-- (lower() of non-ASCII letters is left out: the test cluster's C locale leaves them as they are)
SELECT id, upper(name) AS u, lower(dept) AS l, length(name) AS len, substr(name, 2, 3) AS mid,
    name || '-' || coalesce(dept, '?') AS tag, replace(name, 'a', 'A') AS r,
    position('a' IN name) AS pos, lpad(id::text, 4, '0') AS padded, left(name, 2) AS two,
    reverse(name) AS rev
FROM {people};

-- query: string predicates
SELECT id, name FROM {people}
WHERE name LIKE '%a%' OR name ILIKE 'e%' OR name SIMILAR TO 'K(e|a)n' OR name ~ '^D';

-- query: SIMILAR TO wildcards
SELECT oid, note FROM {orders} WHERE note SIMILAR TO 'lea%' OR note SIMILAR TO '_ulk' OR note SIMILAR TO '%(end|new)';

-- query: CASE, COALESCE and NULLIF
-- known: embedded, spark, view: least() of numerics of two scales prints one scale (PostgreSQL: each value its own)
SELECT id,
    CASE WHEN age < 30 THEN 'young' WHEN age < 50 THEN 'middle' ELSE 'senior' END AS band,
    coalesce(dept, 'none') AS d, nullif(age, 29) AS not29, greatest(age, 40) AS g,
    least(salary, 100000) AS capped
FROM {people};

-- query: three-valued logic
SELECT id, active, NOT active AS na, active AND age > 30 AS both, active OR age > 30 AS either,
    active IS NULL AS unknown, age IS DISTINCT FROM 29 AS differs
FROM {people};

-- query: sums of integer divisions, and a division in one branch
SELECT dept, sum(age / 7) AS weeks, sum(age % 7) AS rest, sum(-(age / 10) + 1) AS tens,
    sum(age + 3000000000) AS big, sum(CASE WHEN age > 30 THEN 100 / (age - 29) ELSE 0 END) AS past30
FROM {people} GROUP BY dept;

-- query: dates and timestamps
-- known: embedded, spark, view: extract() is bigint (PostgreSQL 14+: numeric)
SELECT oid, placed::date AS day, extract(year FROM placed) AS y, extract(dow FROM placed) AS dow,
    date_trunc('month', placed) AS month, placed + interval '1 day' AS tomorrow,
    placed - interval '90 minutes' AS earlier
FROM {orders};

-- query: seconds with their fraction
SELECT oid, extract(second FROM placed + interval '0.25 seconds') AS s,
    date_part('second', placed + interval '1.5 seconds') AS d, extract(second FROM placed) AS whole
FROM {orders};

-- query: date arithmetic
SELECT id, hired + 30 AS later, hired - date '2000-01-01' AS days_since, hired - hired AS zero,
    sum(hired - date '2000-01-01') OVER (ORDER BY id) AS running
FROM {people};

-- query: filters with NULLs
SELECT id, name FROM {people} WHERE dept IS NULL OR salary IS NULL OR age NOT IN (29, 36);

-- query: BETWEEN and IN lists
SELECT oid FROM {orders} WHERE amount BETWEEN 10 AND 500 AND pid IN (1, 2, 3, 6, 8);

-- query: count, sum, avg, min and max per group
-- known: embedded, spark, view: avg(numeric) has 16 decimals (PostgreSQL: a scale that depends on the value)
SELECT dept, count(*) AS n, count(salary) AS paid, sum(salary) AS total, avg(salary) AS mean,
    min(salary) AS lo, max(salary) AS hi, sum(age) AS ages, avg(age) AS mean_age
FROM {people} GROUP BY dept;

-- query: aggregates over doubles
SELECT dept, sum(score) AS total, avg(score) AS mean, min(score) AS lo, max(score) AS hi
FROM {people} GROUP BY dept;

-- query: global aggregate
SELECT count(*) AS n, sum(amount) AS total, avg(amount) AS mean, max(placed) AS latest,
    min(note) AS first_note, count(DISTINCT pid) AS buyers
FROM {orders};

-- query: HAVING
SELECT pid, sum(qty) AS items FROM {orders} GROUP BY pid HAVING sum(qty) > 2 AND count(*) >= 1;

-- query: count DISTINCT per group
SELECT dept, count(DISTINCT age) AS ages, count(DISTINCT salary) AS salaries FROM {people} GROUP BY dept;

-- query: string_agg and bool aggregates
SELECT dept, string_agg(name, ', ' ORDER BY name) AS names, bool_and(active) AS all_active,
    bool_or(active) AS any_active
FROM {people} GROUP BY dept;

-- query: aggregate over an expression with FILTER
SELECT dept, count(*) FILTER (WHERE age > 35) AS older, sum(salary) FILTER (WHERE active) AS active_pay
FROM {people} GROUP BY dept;

-- query: group by an expression
-- known: embedded, spark, view: extract() is bigint (PostgreSQL 14+: numeric)
SELECT extract(year FROM hired) AS y, count(*) AS n FROM {people} GROUP BY extract(year FROM hired);

-- query: inner join
SELECT p.name, o.oid, o.amount FROM {people} p JOIN {orders} o ON o.pid = p.id;

-- query: left join
SELECT p.id, p.name, o.oid FROM {people} p LEFT JOIN {orders} o ON o.pid = p.id;

-- query: right join
SELECT o.oid, p.name FROM {people} p RIGHT JOIN {orders} o ON o.pid = p.id;

-- query: full join
SELECT p.id, o.oid FROM {people} p FULL JOIN {orders} o ON o.pid = p.id;

-- query: join USING
SELECT dept, p.name, d.floor FROM {people} p JOIN {depts} d USING (dept);

-- query: NATURAL join
SELECT * FROM {people} NATURAL JOIN {depts};

-- query: join with a non-equi condition
SELECT p.id, o.oid FROM {people} p JOIN {orders} o ON o.pid = p.id AND o.amount > p.salary / 1000;

-- query: three-way join with aggregate
-- known: embedded, spark, view: coalesce(sum(numeric), 0) prints one scale (PostgreSQL: each value its own)
SELECT d.dept, d.floor, count(o.oid) AS orders, coalesce(sum(o.amount), 0) AS spent
FROM {depts} d LEFT JOIN {people} p ON p.dept = d.dept LEFT JOIN {orders} o ON o.pid = p.id
GROUP BY d.dept, d.floor;

-- query: self join
SELECT a.id, b.id AS twin FROM {people} a JOIN {people} b ON a.salary = b.salary AND a.id < b.id;

-- query: DISTINCT
SELECT DISTINCT dept, age FROM {people};

-- query: DISTINCT ON
-- ordered
SELECT DISTINCT ON (dept) dept, name, salary FROM {people} ORDER BY dept, salary DESC, id;

-- query: top-N
-- ordered
SELECT id, name, salary FROM {people} ORDER BY salary DESC NULLS LAST, id LIMIT 3;

-- query: top-N with OFFSET
-- ordered
SELECT oid, amount FROM {orders} ORDER BY amount, oid LIMIT 4 OFFSET 2;

-- query: row_number per group, filtered
SELECT * FROM (
    SELECT dept, name, salary, row_number() OVER (PARTITION BY dept ORDER BY salary DESC, id) AS rn
    FROM {people}) t
WHERE rn <= 2;

-- query: rank and dense_rank
SELECT id, rank() OVER (ORDER BY salary DESC) AS r, dense_rank() OVER (ORDER BY salary DESC) AS dr
FROM {people};

-- query: running sum and partition aggregates
-- known: embedded, spark, view: avg(bigint) OVER is a double (PostgreSQL: numeric)
SELECT oid, pid, sum(amount) OVER (PARTITION BY pid ORDER BY oid) AS running,
    count(*) OVER (PARTITION BY pid) AS per_pid, avg(qty) OVER (PARTITION BY pid) AS mean_qty
FROM {orders};

-- query: lag and lead
SELECT oid, pid, lag(amount) OVER (PARTITION BY pid ORDER BY oid) AS prev,
    lead(oid, 1, -1) OVER (PARTITION BY pid ORDER BY oid) AS nxt
FROM {orders};

-- query: UNION ALL
SELECT id AS k, name AS label FROM {people} UNION ALL SELECT oid, note FROM {orders};

-- query: UNION
SELECT dept FROM {people} UNION SELECT dept FROM {depts};

-- query: INTERSECT and EXCEPT
SELECT dept FROM {depts} EXCEPT SELECT dept FROM {people}
UNION ALL
(SELECT dept FROM {depts} INTERSECT SELECT dept FROM {people});

-- query: IN subquery
SELECT id, name FROM {people} WHERE id IN (SELECT pid FROM {orders} WHERE amount > 100);

-- query: NOT EXISTS
SELECT id FROM {people} p WHERE NOT EXISTS (SELECT 1 FROM {orders} o WHERE o.pid = p.id);

-- query: NOT IN over a subquery with a NULL (no row: unknown for every id)
SELECT id FROM {people} WHERE id NOT IN (SELECT pid FROM {orders});

-- query: NOT IN without NULLs
SELECT id FROM {people} WHERE id NOT IN (SELECT pid FROM {orders} WHERE pid IS NOT NULL);

-- query: IN under OR, EXISTS with a comparison
SELECT p.id FROM {people} p WHERE p.age > 60 OR p.id IN (SELECT pid FROM {orders} WHERE qty > 4)
    OR EXISTS (SELECT 1 FROM {orders} o WHERE o.pid = p.id AND o.amount > p.salary / 1000);

-- query: EXISTS and IN as values (IN is NULL for a NULL age)
SELECT p.id, EXISTS (SELECT 1 FROM {orders} o WHERE o.pid = p.id AND o.amount > 100) AS big,
    p.age IN (SELECT qty * 10 FROM {orders}) AS age_qty FROM {people} p;

-- query: scalar subquery
-- known: embedded, spark, view: numeric minus avg(numeric): the scale differs per engine (PostgreSQL: by the value)
SELECT id, salary - (SELECT avg(salary) FROM {people}) AS above FROM {people};

-- query: correlated scalar subquery
SELECT p.id, (SELECT count(*) FROM {orders} o WHERE o.pid = p.id) AS n FROM {people} p;

-- query: CTE
WITH spend AS (SELECT pid, sum(amount) AS total FROM {orders} GROUP BY pid)
SELECT p.name, s.total FROM {people} p JOIN spend s ON s.pid = p.id WHERE s.total > 50;

-- query: aggregate of an aggregate
SELECT max(n) AS most, min(n) AS fewest, count(*) AS groups
FROM (SELECT dept, count(*) AS n FROM {people} GROUP BY dept) t;

-- query: ROLLUP
SELECT dept, active, count(*) AS n FROM {people} GROUP BY ROLLUP (dept, active);

-- query: GROUPING SETS with grouping()
SELECT dept, age, grouping(dept, age) AS g, count(*) AS n
FROM {people} GROUP BY GROUPING SETS ((dept), (age), ());

-- query: percentile and mode
SELECT dept, percentile_cont(0.5) WITHIN GROUP (ORDER BY salary) AS median,
    percentile_disc(0.5) WITHIN GROUP (ORDER BY age) AS mid_age
FROM {people} GROUP BY dept;

-- query: stddev and variance
-- known: embedded, spark, view: stddev and var of integers are doubles (PostgreSQL: numeric)
SELECT dept, stddev_samp(age) AS sd, var_pop(age) AS vp FROM {people} GROUP BY dept;

-- query: arrays
SELECT dept, array_agg(id ORDER BY id) AS ids FROM {people} GROUP BY dept;

-- query: generate_series join
SELECT g, count(o.oid) AS n FROM generate_series(0, 10) AS g LEFT JOIN {orders} o ON o.qty = g GROUP BY g;

-- query: generate_series without an alias, and beside a table
-- ordered
SELECT * FROM generate_series(-2, 4, 3), {depts} ORDER BY 1, dept;

-- query: scalar functions in FROM, each a table of one row
-- ordered
SELECT * FROM abs(-3), upper('x') AS u, round(2.5) AS r(half), {depts} ORDER BY dept;

-- query: VALUES list
SELECT v.k, v.label, d.floor FROM (VALUES ('eng', 'E'), ('ops', 'O'), ('none', 'N')) AS v(k, label)
LEFT JOIN {depts} d ON d.dept = v.k;

-- query: float functions as text
SELECT id, sqrt(age)::text, sqrt(abs(score))::text AS r, floor(score)::text AS f, ceil(score) || '' AS c,
    round(score)::text AS rd, trunc(score)::text AS t, concat(power(age, 2), '/', floor(age)) AS p,
    'pi ' || round(pi()) AS pi
FROM {people};

-- query: casts to varchar(n) keep n characters
SELECT id, name::varchar(3) AS n3, CAST(dept AS varchar(1)) AS d1, (name || '!')::varchar(20) AS whole,
    score::varchar(3) AS s3
FROM {people};

-- query: floats as text
SELECT id, score::text AS s, 'score ' || score AS label, concat(name, ':', score) AS c,
    (score * 1e20)::text AS big, (score / 1e6)::text AS small, score::real::text AS r,
    (score * 1e5)::real || '' AS rbig, format('%s=%L (%s%%)', name, score, age) AS f
FROM {people};

-- query: unaliased calls are named after the function as written
-- view: refused 42701
SELECT id, lpad(name, 10, '*'), rpad(dept, 6), strpos(name, 'a'), position('a' in name), mod(age, 7),
    date_trunc('month', hired::timestamp), make_date(2024, 1, id), to_date('2024-05-17', 'YYYY-MM-DD'),
    name ~ '^[A-G]', hired - DATE '2000-01-01', interval '90 minutes', length(name), upper(dept)
FROM {people};

-- query: format with %I and %L, quote_literal and quote_nullable
SELECT id, format('%I.%I', coalesce(dept, 'none'), name) AS qi, quote_literal(name) AS ql,
    quote_nullable(dept) AS qn, format('%L/%s', dept, age) AS f, quote_literal(age) AS qa,
    quote_ident(name) AS qi2, quote_ident(CASE WHEN id % 2 = 0 THEN 'user' ELSE dept || '$' END) AS qk
FROM {people};
