-- reserved for the model usage ledger
SELECT 1;
