// A transactional KafkaProducer whose transaction runs past transaction.timeout.ms: the
// coordinator aborts it (bumping the epoch), the producer's next send fails, and then it
// aborts and goes on with a new transaction, as it would against Kafka. Prints what each
// step gave: "send <exception>", "abort ok" or "abort <exception>", and after a good
// abort "next committed" and the read_committed values.
// Usage: TxnTimeoutScenario BOOTSTRAP TOPIC
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxnTimeoutScenario {
    static final String TID = "java-tx-timeout";

    static TransactionDescription describe(Admin admin) throws Exception {
        return admin.describeTransactions(List.of(TID)).description(TID).get();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        Properties p = Check.props(bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, TID);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "2000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p);
             Admin admin = Admin.create(Check.props(bootstrap))) {
            producer.initTransactions();
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, "k", "timed-out")).get();
            int epoch = describe(admin).producerEpoch();
            // The coordinator's timeout abort shows as a bumped epoch and an ended state.
            long deadline = System.currentTimeMillis() + 60000;
            TransactionDescription d = describe(admin);
            while (d.producerEpoch() == epoch && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
                d = describe(admin);
            }
            Check.that(d.producerEpoch() == epoch + 1, "no timeout abort: " + d);
            Check.out("timed out " + d.state());
            try {
                producer.send(new ProducerRecord<>(topic, 0, "k", "late")).get();
                Check.that(false, "a send of the timed-out transaction succeeded");
            } catch (ExecutionException e) {
                Check.out("send " + e.getCause().getClass().getSimpleName());
            }
            try {
                producer.abortTransaction();
                Check.out("abort ok");
            } catch (Exception e) {
                Check.out("abort " + e.getClass().getSimpleName());
                return;
            }
            producer.beginTransaction();
            producer.send(new ProducerRecord<>(topic, 0, "k", "next"));
            producer.commitTransaction();
            Check.out("next committed");
        }
        Properties c = Check.props(bootstrap);
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long deadline = System.currentTimeMillis() + 15000;
            while (out.isEmpty() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    out.add(r.value());
                }
            }
        }
        Check.out("read_committed " + String.join(",", out));
        Check.out("OK timeout");
    }
}
