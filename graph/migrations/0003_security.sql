-- reserved for the security perimeter (audit log)
SELECT 1;
