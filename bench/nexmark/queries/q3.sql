-- Nexmark q3: local item suggestion, a stream-stream join of auctions in category 10 with their
-- sellers from Oregon, Idaho or California. Upper-case states, as the generator (and Flink's q3).
CREATE MATERIALIZED VIEW nexmark_q3 AS
SELECT P.name,
       P.city,
       P.state,
       A.id
FROM auction AS A
         INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = 10
  AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA');
