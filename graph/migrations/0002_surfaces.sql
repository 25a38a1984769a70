-- reserved for the HTTP surfaces (api tokens, turn event log)
SELECT 1;
